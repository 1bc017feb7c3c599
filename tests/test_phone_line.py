"""G.711 for phone calls (server/telephony/g711.py) and the test telephone line built on
it (testkit/phone_line.py)."""

from __future__ import annotations

import numpy as np
import pytest

from server.telephony.g711 import G711Decoder, G711Encoder, G711Error
from testkit.phone_line import phone_line

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


@pytest.mark.parametrize("law", ["mulaw", "alaw"])
def test_20_ms_frames_go_through_one_byte_a_sample_and_come_back(law: str) -> None:
    x = tones(300, seconds=1.0)
    encoder, decoder = G711Encoder(law), G711Decoder(law)
    coded = [encoder.encode(x[i : i + 320].tobytes(), RATE) for i in range(0, x.size, 320)]
    assert sum(map(len, coded)) >= 0.99 * x.size / 2  # 8 kHz, a byte a sample
    back = np.frombuffer(b"".join(decoder.decode(c) for c in coded), np.int16)
    assert back.size >= 0.98 * x.size
    assert 0.9 < level(back[:8000], 300) / level(x[:8000], 300) < 1.1


def test_an_unknown_law_is_refused() -> None:
    with pytest.raises(G711Error, match=r"unknown G\.711 law"):
        G711Decoder("ulaw16")
