"""The test telephone line (testkit/phone_line.py): 8 kHz G.711 μ-law through FFmpeg."""

from __future__ import annotations

import numpy as np

from testkit.phone_line import from_mulaw, mulaw, phone_line

RATE = 16000


def tones(*hz: float, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return sum(4000 * np.sin(2 * np.pi * f * t) for f in hz).astype(np.int16)


def level(x: np.ndarray, hz: float) -> float:
    spectrum = np.abs(np.fft.rfft(x.astype(np.float64)))
    return float(spectrum[round(hz * x.size / RATE)])


def test_the_voice_band_passes_and_what_is_above_4_khz_does_not() -> None:
    x = tones(440, 6000)
    y = phone_line(x)
    assert y.size == x.size
    assert 0.9 < level(y, 440) / level(x, 440) < 1.1
    assert level(y, 6000) / level(x, 6000) < 0.01


def test_mulaw_is_one_byte_a_sample_and_close_to_the_input() -> None:
    x = tones(300, seconds=0.02)[::2]  # 160 samples: one 20 ms frame at 8 kHz
    coded = mulaw(x)
    assert len(coded) == x.size
    back = from_mulaw(coded)
    # μ-law keeps about 38 dB of signal to quantisation noise on a loud tone.
    noise = np.mean((back.astype(np.float64) - x) ** 2)
    assert 10 * np.log10(np.mean(x.astype(np.float64) ** 2) / noise) > 30
