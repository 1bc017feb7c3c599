"""G.711 at 8 kHz, the phone network's audio: μ-law (PCMU: Twilio, Telnyx, Plivo) and
A-law (PCMA: Telnyx outside North America), to and from 16 kHz mono s16.

FFmpeg does both the companding (its ``pcm_mulaw``/``pcm_alaw`` codecs) and the rate
change (libswresample, :class:`~pipeline.audio.resampling.StreamResampler`) through PyAV,
with a codec context and a resampler kept per direction of a stream, so a 20 ms frame is
a few calls and chunk edges are seamless.
"""

from __future__ import annotations

from typing import Literal, cast

import av
import numpy as np
from av.audio.codeccontext import AudioCodecContext

from pipeline.audio.resampling import StreamResampler

NARROW = 8000
WIDE = 16000
_CODECS = {"mulaw": "pcm_mulaw", "alaw": "pcm_alaw"}


class G711Error(ValueError):
    """Audio that is not G.711, or an unknown law."""


def _context(law: str, mode: Literal["r", "w"]) -> AudioCodecContext:
    """FFmpeg's G.711 codec for ``law``, to read (``"r"``) or write (``"w"``) at 8 kHz."""
    if law not in _CODECS:
        raise G711Error(f"unknown G.711 law {law!r}: mulaw or alaw")
    codec = cast(AudioCodecContext, av.CodecContext.create(_CODECS[law], mode))
    codec.sample_rate, codec.layout = NARROW, "mono"
    return codec


class G711Decoder:
    """G.711 bytes at 8 kHz (one byte a sample) → 16 kHz mono s16 bytes."""

    def __init__(self, law: str = "mulaw") -> None:
        self._codec = _context(law, "r")
        self._up = StreamResampler(WIDE)

    def decode(self, data: bytes) -> bytes:
        if not data:
            return b""
        frames = self._codec.decode(av.Packet(data))
        return b"".join(b for f in frames for b in self._up.resample_frame(f))


class G711Encoder:
    """Mono s16 bytes at any rate → G.711 bytes at 8 kHz."""

    def __init__(self, law: str = "mulaw") -> None:
        self._codec = _context(law, "w")
        self._codec.format = "s16"
        self._down = StreamResampler(NARROW)

    def encode(self, pcm: bytes, sample_rate: int) -> bytes:
        narrow = self._down.resample(pcm, sample_rate) if sample_rate != NARROW else pcm
        if not narrow:
            return b""
        row = np.frombuffer(narrow, np.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(row, format="s16", layout="mono")
        frame.sample_rate = NARROW
        return b"".join(bytes(p) for p in self._codec.encode(frame))
