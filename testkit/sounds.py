"""Sounds that are not speech, for what must not take the floor from the bot: coughs (a
noise burst, or one with a voiced tail, as a real cough has), breaths and clicks (a door,
a keyboard). Synthesized from a seed, so every run sends the same sounds; 16 kHz mono
int16 like :mod:`testkit.voices`."""

from __future__ import annotations

import numpy as np

from testkit.voices import RATE


def band(noise: np.ndarray, low: float, high: float) -> np.ndarray:
    """``noise`` with everything outside ``low``..``high`` Hz removed (FFT mask)."""
    freqs = np.fft.rfftfreq(noise.size, 1 / RATE)
    spectrum = np.fft.rfft(noise) * ((freqs >= low) & (freqs <= high))
    return np.fft.irfft(spectrum, noise.size)


def cough(seed: int, seconds: float, voiced: bool = False) -> np.ndarray:
    """A cough: a burst of 300-3500 Hz noise (10 ms attack, then decaying over the
    length); ``voiced`` adds the throat's buzz after the first 30 ms (110-220 Hz,
    falling). Unscaled: pass it through :func:`testkit.speech.at_level`."""
    rng = np.random.default_rng(seed)
    n = round(seconds * RATE)
    t = np.arange(n) / RATE
    burst = band(rng.normal(0, 1, n), 300, 3500) * np.minimum(t / 0.01, 1)
    if not voiced:
        return burst * np.exp(-t / (seconds / 3))
    burst *= np.exp(-t / 0.03)
    pitch = rng.uniform(110, 220) * (1 - 0.3 * t / seconds)
    buzz = band(2 * (np.cumsum(pitch) / RATE % 1.0) - 1, 80, 2500)
    tail = np.clip((t - 0.03) / 0.01, 0, 1) * np.exp(-np.maximum(t - 0.03, 0) / (seconds / 2.5))
    return 3 * burst + rng.uniform(0.5, 2) * buzz * tail


def breath(seed: int, seconds: float) -> np.ndarray:
    """A breath: noise below 1 kHz swelling and fading over ``seconds``."""
    rng = np.random.default_rng(seed)
    n = round(seconds * RATE)
    return band(rng.normal(0, 1, n), 0, 1000) * np.sin(np.pi * np.arange(n) / n) ** 2


def clicks(seed: int, seconds: float = 0.2, count: int = 4) -> np.ndarray:
    """A few 5 ms clicks within ``seconds`` (a door latch, keys)."""
    rng = np.random.default_rng(seed)
    n = round(seconds * RATE)
    out = np.zeros(n)
    decay = np.exp(-np.arange(80) / 15)
    for start in rng.integers(0, n - 80, count):
        out[start : start + 80] += rng.normal(0, 1, 80) * decay
    return out
