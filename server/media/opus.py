"""Opus encoding of the outbound track, inline on the event loop.

aiortc encodes raw frames in the default executor (a thread hop per 20 ms per session,
plus a resample to stereo at 96 kbit/s). Speech needs neither: one mono encoder at
32 kbit/s costs well under 100 µs a frame, less than the hop. A track that returns
ready packets is sent as is. And most of a call is silence: once the encoder has settled
on it, its packet is repeated instead of encoded again, which is what an idle session
costs.
"""

from __future__ import annotations

import fractions

from av import AudioFrame, CodecContext, Packet

RATE = 48000
FRAME_SAMPLES = 960  # 20 ms
TIME_BASE = fractions.Fraction(1, RATE)
BITRATE = 32000
# Silent frames encoded before the packet is reused: by then the encoder's state (and so
# the decoder's) is that of silence, and the next speech starts from where it would.
SETTLE_FRAMES = 10


class OpusEncoder:
    """Encodes 20 ms frames of 48 kHz mono s16 into Opus packets, one per frame."""

    def __init__(self, bitrate: int = BITRATE) -> None:
        codec = CodecContext.create("libopus", "w")
        codec.bit_rate = bitrate
        codec.format = "s16"
        codec.layout = "mono"
        codec.sample_rate = RATE
        codec.time_base = TIME_BASE
        codec.options = {"application": "voip"}
        self._codec = codec
        self._frame = AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        self._frame.sample_rate = RATE
        self._frame.time_base = TIME_BASE
        self._frame_pts = 0
        self._silent_run = 0
        self._silence: bytes | None = None

    def encode(self, pcm: bytes, pts: int, silent: bool = False) -> Packet:
        """One packet for ``pcm`` (1920 bytes); ``silent`` says the frame is all zeros."""
        if silent and self._silence is not None:
            payload = self._silence
        else:
            payload = self._encode(pcm)
            if not silent:
                self._silent_run = 0
                self._silence = None
            else:
                self._silent_run += 1
                if self._silent_run >= SETTLE_FRAMES:
                    self._silence = payload
        packet = Packet(payload)
        packet.pts = pts
        packet.time_base = TIME_BASE
        return packet

    def _encode(self, pcm: bytes) -> bytes:
        frame = self._frame
        frame.planes[0].update(pcm)
        frame.pts = self._frame_pts
        self._frame_pts += FRAME_SAMPLES
        packets = self._codec.encode(frame)
        # libopus answers every full frame with one packet (its lookahead is inside it).
        return bytes(packets[0]) if packets else b""
