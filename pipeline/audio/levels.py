"""How loud audio is: mean power, dBFS, and a 0..1 level on a chosen dB scale.

One home for the arithmetic that the VAD's volume gate, the RTVI audio levels, the echo
detector's envelopes, the embedded TTS's loudness normalisation and the embedded STT's
trailing-silence cut all share. Samples are floats relative to full scale (-1..1); int16
PCM is divided by :data:`INT16_FULL_SCALE` first, or passed with ``full_scale``.

Each caller keeps its own floor (the dBFS that digital silence reads as): it is part of
what that caller computes (the echo detector correlates envelopes, so its floor shapes
the silent blocks; a 0..1 level only needs one below the bottom of its scale).
Arrays keep their float type: the 20 ms paths stay in float32.
"""

from __future__ import annotations

import math

import numpy as np

INT16_FULL_SCALE = 32768.0


def amplitude(db: float) -> float:
    """The linear amplitude of ``db`` dBFS: -20 → 0.1."""
    return 10.0 ** (db / 20.0)


def _power(db: float) -> float:
    return 10.0 ** (db / 10.0)


def mean_square(samples: np.ndarray, full_scale: float = 1.0) -> float:
    """Mean power of ``samples`` relative to ``full_scale`` (0.0 for no samples)."""
    if samples.size == 0:
        return 0.0
    values = samples.astype(np.float32, copy=False) if samples.dtype.kind in "iu" else samples
    return float(np.dot(values, values)) / samples.size / (full_scale * full_scale)


def dbfs(power: float, floor_db: float) -> float:
    """A mean power in dBFS; silence reads ``floor_db`` (its power is added, so the log
    is always defined and just above the floor there is no cliff)."""
    return 10.0 * math.log10(power + _power(floor_db))


def level(db: float, floor_db: float, top_db: float = 0.0) -> float:
    """``db`` mapped linearly onto 0..1: ``floor_db`` and below → 0, ``top_db`` and above → 1."""
    return min(1.0, max(0.0, (db - floor_db) / (top_db - floor_db)))


def block_mean_squares(samples: np.ndarray, block: int) -> np.ndarray:
    """The mean power of each whole block of ``block`` samples (a partial last block is
    left out)."""
    usable = samples.size - samples.size % block
    blocks = samples[:usable].reshape(-1, block)
    return np.mean(blocks * blocks, axis=1)


def block_dbfs(samples: np.ndarray, block: int, floor_db: float) -> np.ndarray:
    """The level in dBFS of each whole block; silence reads ``floor_db``."""
    return 10.0 * np.log10(block_mean_squares(samples, block) + _power(floor_db))
