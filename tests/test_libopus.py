"""server.media.libopus: the ctypes binding encodes and decodes what it should."""

from __future__ import annotations

import numpy as np
import pytest

from server.media.libopus import APPLICATION_RESTRICTED_LOWDELAY, Decoder, Encoder, OpusError


def _tone(rate: int, seconds: float) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


def test_round_trip_at_another_rate_keeps_the_tone() -> None:
    encoder = Encoder(48000, 32000, 5)
    decoder = Decoder(16000)
    tone = _tone(48000, 1.0)
    out = b"".join(
        decoder.decode(encoder.encode(tone[i : i + 960].tobytes()))
        for i in range(0, tone.size, 960)
    )
    decoded = np.frombuffer(out, np.int16)
    assert decoded.size == 16000  # 50 frames of 320 samples: straight to 16 kHz
    spectrum = np.abs(np.fft.rfft(decoded[4000:].astype(np.float32)))
    peak_hz = np.argmax(spectrum) * 16000 / (decoded.size - 4000)
    assert abs(peak_hz - 440) < 5
    assert np.sqrt(np.mean(decoded[4000:].astype(np.float64) ** 2)) > 3000


def test_a_corrupt_or_empty_packet_raises_opus_error() -> None:
    decoder = Decoder(16000)
    with pytest.raises(OpusError):
        decoder.decode(b"")
    with pytest.raises(OpusError):
        decoder.decode(b"\xff" * 3)  # code 3 with no frame count: invalid


def test_a_bad_setting_raises() -> None:
    with pytest.raises(OpusError):
        Encoder(44100, 32000, 5)  # not an Opus rate


BANDS = [(8000, range(20, 24)), (11025, range(24, 28)), (20000, range(28, 32)),
         (24000, range(28, 32))]  # fmt: skip


@pytest.mark.parametrize("hz, configs", BANDS)
def test_celt_codes_up_to_the_bandwidth_it_is_limited_to(hz: int, configs: range) -> None:
    """The TOC byte's configuration: CELT alone is 16-31, in four bandwidths of four
    frame sizes (wide, super-wide, full from 20)."""
    encoder = Encoder(48000, 64000, 8, APPLICATION_RESTRICTED_LOWDELAY)
    encoder.limit_bandwidth(hz)
    noise = np.random.default_rng(1).normal(0, 3000, 48000).astype(np.int16)
    tocs = {encoder.encode(noise[i : i + 960].tobytes())[0] >> 3 for i in range(0, 48000, 960)}
    assert tocs <= set(configs), tocs
