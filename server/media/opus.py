"""Opus encoding of the outbound track, inline on the event loop.

aiortc encodes raw frames in the default executor (a thread hop per 20 ms per session,
plus a resample to stereo at 96 kbit/s). Speech needs neither: one mono encoder, called
through ctypes (:mod:`server.media.libopus`). A track that returns ready packets is sent
as is. And most of a call is silence: once the encoder has settled on it, its packet is
repeated instead of encoded again, which is what an idle session costs.

With ``dtx`` the silence is not sent at all, as a browser sends it with Opus DTX
(libwebrtc's rule on libopus's DTX output): after the settling frames, one packet of the
TOC byte alone says "comfort noise from here" (a receiver's decoder conceals, i.e. plays
silence, until the next packet), then nothing but a silence frame and that byte again
every ``DTX_UPDATE_FRAMES``, libopus's 400 ms. Sending is most of what a silent frame
costs the server (timer, SRTP, a system call, the kernel's UDP path): see
:class:`~server.media.outbound_track.PacedAudioTrack`, which sleeps through the frames
that go unsent.

The bot's voice is coded by CELT alone (libopus's restricted-low-delay application) at
64 kbit/s, complexity 8, coding nothing above half the TTS's sample rate. On eight voices
(the embedded one, three sentences; espeak-ng in five voices and four languages),
``bench/opus_voice.py``: 70 µs a 20 ms frame against 138 µs for SILK and CELT together
(hybrid, the VOIP application) at 32 kbit/s, used before, and PESQ wide-band 4.30
median, 3.96 worst against 3.74 and 3.48; no voice scored lower. It also takes 4 ms off
the codec's delay. A client that caps what it receives below 64 kbit/s
(``maxaveragebitrate`` in its offer) gets hybrid under the cap: CELT loses most at low
rates. A microphone (``testkit``'s) is coded as a browser's: VOIP, SILK or hybrid.
"""

from __future__ import annotations

import fractions

from av import Packet

from server.media.libopus import APPLICATION_RESTRICTED_LOWDELAY, APPLICATION_VOIP, Encoder

RATE = 48000
FRAME_SAMPLES = 960  # 20 ms
TIME_BASE = fractions.Fraction(1, RATE)
BITRATE = 32000
# A microphone's: libwebrtc's on phones. On speech it halved the VOIP encoder's CPU against
# 10 (PyAV's), for packets within 3 % of the same size.
COMPLEXITY = 5
# The bot's voice (see above). Under a cap below VOICE_BITRATE: hybrid, at most BITRATE.
VOICE_APPLICATION = APPLICATION_RESTRICTED_LOWDELAY
VOICE_BITRATE = 64000
VOICE_COMPLEXITY = 8
MIN_BITRATE = 6000  # Opus's least
# Silent frames encoded before the packet is reused: by then the encoder's state (and so
# the decoder's) is that of silence, and the next speech starts from where it would.
# It is also libopus's DTX hangover (200 ms of silence sent before DTX starts).
SETTLE_FRAMES = 10
# In DTX, a silence frame is sent every this many frames (libopus: 400 ms), each followed
# by the DTX byte, so that a receiver's comfort noise stays that of silence.
DTX_UPDATE_FRAMES = 20


class OpusEncoder:
    """Encodes 20 ms frames of 48 kHz mono s16 into Opus packets, one per frame (or, with
    ``dtx``, none for most frames of a silence: :meth:`encode` returns None)."""

    def __init__(
        self,
        bitrate: int = BITRATE,
        complexity: int = COMPLEXITY,
        dtx: bool = False,
        application: int = APPLICATION_VOIP,
    ) -> None:
        self._encoder = Encoder(RATE, bitrate, complexity, application)
        self._dtx = dtx
        self._silent_run = 0
        self._silence: bytes | None = None

    @classmethod
    def for_voice(cls, dtx: bool = False, max_bitrate: int | None = None) -> OpusEncoder:
        """The bot's voice's encoder, under a receiver's ``max_bitrate`` (bit/s) if any."""
        if max_bitrate is None or max_bitrate >= VOICE_BITRATE:
            return cls(VOICE_BITRATE, VOICE_COMPLEXITY, dtx, VOICE_APPLICATION)
        return cls(max(MIN_BITRATE, min(max_bitrate, BITRATE)), COMPLEXITY, dtx)

    def limit_to_rate(self, rate: int) -> None:
        """Code nothing above half of ``rate``: the rate the audio was recorded at, or the
        most the far end plays at."""
        self._encoder.limit_bandwidth(rate // 2)

    def encode(self, pcm: bytes, pts: int, silent: bool = False) -> Packet | None:
        """One packet for ``pcm`` (1920 bytes), or None when DTX sends none; ``silent``
        says the frame is all zeros."""
        if silent and self._silence is not None:
            self._silent_run += 1
            payload = self._dtx_payload() if self._dtx else self._silence
            if payload is None:
                return None
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

    def unsent_ahead(self) -> int:
        """How many of the next frames DTX would not send if they are silent (0 without
        DTX or before the silence has settled)."""
        if not self._dtx or self._silence is None:
            return 0
        phase = (self._silent_run - SETTLE_FRAMES) % DTX_UPDATE_FRAMES  # of the next frame
        return max(0, DTX_UPDATE_FRAMES - 1 - phase) if phase else 0

    def skip(self, frames: int) -> None:
        """``frames`` silent frames went by unsent (a track slept through them)."""
        self._silent_run += frames

    def _dtx_payload(self) -> bytes | None:
        assert self._silence is not None
        phase = (self._silent_run - SETTLE_FRAMES - 1) % DTX_UPDATE_FRAMES
        if phase == 0:
            return bytes([self._silence[0] & 0xFC])  # the TOC byte alone: "DTX from here"
        if phase == DTX_UPDATE_FRAMES - 1:
            return self._silence
        return None
