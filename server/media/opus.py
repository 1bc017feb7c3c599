"""Opus encoding of the outbound track, inline on the event loop.

aiortc encodes raw frames in the default executor (a thread hop per 20 ms per session,
plus a resample to stereo at 96 kbit/s). Speech needs neither: one mono encoder at 32
kbit/s, called through ctypes (:mod:`server.media.libopus`). A track that returns ready
packets is sent as is. And most of a call is silence: once the encoder has settled on it,
its packet is repeated instead of encoded again, which is what an idle session costs.
"""

from __future__ import annotations

import fractions

from av import Packet

from server.media.libopus import Encoder

RATE = 48000
FRAME_SAMPLES = 960  # 20 ms
TIME_BASE = fractions.Fraction(1, RATE)
BITRATE = 32000
# 10, as PyAV's wrapper used. 5 (libwebrtc's on phones) halves the cost on speech (~190 µs a
# frame against ~380 µs here), but the echo test over WebRTC
# (tests/test_interruptions_webrtc.py, the bot's own voice at -10 dB) heard a false start
# in 2 of 4 runs: AEC3 models the played PCM, not what the codec made of it. (That test
# also failed in 11 of 52 runs at 10, from holes in the canceller's reference, since
# fixed.) At 20 talking calls (bench/load.py) 5 saved nothing measurable: 3.7-3.8 % of a
# core a call, against 3.3-3.7 at 10, so it stays.
COMPLEXITY = 10
# Silent frames encoded before the packet is reused: by then the encoder's state (and so
# the decoder's) is that of silence, and the next speech starts from where it would.
SETTLE_FRAMES = 10


class OpusEncoder:
    """Encodes 20 ms frames of 48 kHz mono s16 into Opus packets, one per frame."""

    def __init__(self, bitrate: int = BITRATE, complexity: int = COMPLEXITY) -> None:
        self._encoder = Encoder(RATE, bitrate, complexity)
        self._silent_run = 0
        self._silence: bytes | None = None

    def encode(self, pcm: bytes, pts: int, silent: bool = False) -> Packet:
        """One packet for ``pcm`` (1920 bytes); ``silent`` says the frame is all zeros."""
        if silent and self._silence is not None:
            payload = self._silence
        else:
            payload = self._encoder.encode(pcm)
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
