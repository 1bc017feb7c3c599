"""A telephone line for test audio: 16 kHz speech down to 8 kHz, through G.711 μ-law, and
back up to 16 kHz, as a caller's voice reaches the server from a phone provider's media
stream (Twilio, Telnyx: base64 μ-law at 8 kHz). FFmpeg does the work through PyAV (its
``pcm_mulaw`` codec and its resampler), not a hand-written table."""

from __future__ import annotations

import av
import numpy as np

WIDE = 16000
NARROW = 8000


def _resample(samples: np.ndarray, rate: int, to: int) -> np.ndarray:
    row = np.ascontiguousarray(samples, np.int16).reshape(1, -1)
    frame = av.AudioFrame.from_ndarray(row, format="s16", layout="mono")
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="s16", layout="mono", rate=to)
    out = [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
    out += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
    return np.concatenate(out).astype(np.int16) if out else np.zeros(0, np.int16)


def mulaw(samples: np.ndarray) -> bytes:
    """8 kHz s16 samples as G.711 μ-law bytes (one a sample)."""
    codec = av.CodecContext.create("pcm_mulaw", "w")
    codec.sample_rate, codec.format, codec.layout = NARROW, "s16", "mono"
    row = np.ascontiguousarray(samples, np.int16).reshape(1, -1)
    frame = av.AudioFrame.from_ndarray(row, format="s16", layout="mono")
    frame.sample_rate = NARROW
    return b"".join(bytes(p) for p in codec.encode(frame))


def from_mulaw(data: bytes) -> np.ndarray:
    """G.711 μ-law bytes as 8 kHz s16 samples."""
    codec = av.CodecContext.create("pcm_mulaw", "r")
    codec.sample_rate, codec.layout = NARROW, "mono"
    frames = codec.decode(av.Packet(data))
    return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.int16)


def phone_line(samples: np.ndarray) -> np.ndarray:
    """16 kHz s16 speech as it arrives over a narrowband μ-law line (16 kHz again, the
    same length)."""
    narrow = _resample(samples.astype(np.int16), WIDE, NARROW)
    wide = _resample(from_mulaw(mulaw(narrow)), NARROW, WIDE)
    out = np.zeros(samples.size, np.int16)
    out[: min(wide.size, out.size)] = wide[: out.size]
    return out
