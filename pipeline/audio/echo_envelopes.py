"""The arithmetic of echo evidence: 10 ms log-energy envelopes of what was heard and of
what was played, and how well the one follows the other at each delay.

Envelopes, not waveforms: a low-bitrate codec on the way (Opus at 32 kbit/s) scrambles
the phase, so a waveform correlation (GCC-PHAT) of a real echo peaked at 0.1-0.2, its
envelope at 0.9. Both :class:`~pipeline.audio.echo.EchoPathDetector` (seconds of history, a
few times a second) and :class:`~pipeline.audio.near_end.NearEndGate` (0.3 s, every frame
while the path is unknown) read them. Here: the envelopes (:func:`levels`), a history of
them (:class:`History`), and the detector's question, :func:`correlations`: at each
delay, the Pearson correlation over the blocks in which the bot was audible at that
delay. Only there: where it was silent there is nothing to echo, and counting those
blocks let one onset decide. A caller who began 0.3 s after the bot made the envelopes
step up together at that delay, and two windows in a row read 0.82: an echo path
"found" in a call that had none, and AEC3 then damped the whole question.
"""

from __future__ import annotations

import numpy as np

from pipeline.audio.levels import INT16_FULL_SCALE

RATE = 16000
BLOCK = RATE // 100  # 10 ms
FLOOR_DB = -90.0  # what a silent block reads
AUDIBLE_DB = -45.0  # a block of the bot worth an echo at all
LOUD_DB = -35.0  # a block of the bot this loud would echo above the VAD's volume gate
_FLOOR_POWER = 10.0 ** (FLOOR_DB / 10.0)
_SCALE = 1.0 / (INT16_FULL_SCALE * INT16_FULL_SCALE * BLOCK)


def levels(samples: np.ndarray) -> np.ndarray:
    """dBFS of each whole 10 ms block of int16 ``samples`` (a partial last block is left
    out); silence reads ``FLOOR_DB``."""
    usable = samples.size - samples.size % BLOCK
    blocks = samples[:usable].astype(np.float32).reshape(-1, BLOCK)
    power = np.einsum("ij,ij->i", blocks, blocks).astype(np.float64) * _SCALE
    return 10.0 * np.log10(power + _FLOOR_POWER)


def delayed(heard: np.ndarray, played: np.ndarray) -> np.ndarray:
    """``played`` (``heard.size`` + D blocks, ending when ``heard`` ends) as it would be
    heard at each delay 0..D blocks: row ``d`` is the window ``d`` blocks back (a view)."""
    windows = np.lib.stride_tricks.sliding_window_view(played, heard.size)
    return windows[::-1]


def correlations(heard: np.ndarray, windows: np.ndarray, min_blocks: int) -> np.ndarray:
    """Pearson correlation of ``heard`` with each row of ``windows`` (:func:`delayed`),
    over the blocks where that row is audible; 0 where fewer than ``min_blocks`` are, or
    where either side is flat (no evidence)."""
    mask = windows > AUDIBLE_DB
    n = mask.sum(axis=1).astype(np.float64)
    h = np.where(mask, heard[None, :], 0.0)
    p = np.where(mask, windows, 0.0)
    sum_h, sum_p = h.sum(axis=1), p.sum(axis=1)
    cov = n * np.einsum("ij,ij->i", h, p) - sum_h * sum_p
    var_h = n * np.einsum("ij,ij->i", h, h) - sum_h * sum_h
    var_p = n * np.einsum("ij,ij->i", p, p) - sum_p * sum_p
    # A flat side (0.1 dB of spread) explains nothing: r = 0, not a ratio of rounding errors.
    flat = 0.01 * n * n
    valid = (n >= min_blocks) & (var_h > flat) & (var_p > flat)
    denominator = np.sqrt(np.where(valid, var_h * var_p, 1.0))
    return np.where(valid, cov / denominator, 0.0)


class History:
    """The last ``size`` values appended, readable as one contiguous view without a copy
    per append (the buffer is compacted once every few appends)."""

    def __init__(self, size: int, before: float | None = FLOOR_DB) -> None:
        """``before``: what the history holds before the first value; None: the first
        value (the microphone: a history starting at the floor would show the room's
        noise as an onset at the start of the call)."""
        self.size = size
        self._data = np.full(4 * size, FLOOR_DB if before is None else before)
        self._end = 0 if before is None else size

    def extend(self, values: np.ndarray) -> None:
        n = values.size
        if self._end == 0:
            self._data[: self.size] = values[0]
            self._end = self.size
        if self._end + n > self._data.size:
            keep = self.size
            self._data[:keep] = self._data[self._end - keep : self._end]
            self._end = keep
        self._data[self._end : self._end + n] = values
        self._end += n

    def last(self) -> np.ndarray:
        return self._data[self._end - self.size : self._end]
