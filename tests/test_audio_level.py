"""Loudness arithmetic: mean power, dBFS with a floor, 0..1 levels, per-block power."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.audio.levels import (
    INT16_FULL_SCALE,
    amplitude,
    block_dbfs,
    block_mean_squares,
    dbfs,
    level,
    mean_square,
)

RATE = 16000


def sine(db_peak: float, seconds: float = 0.1) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (amplitude(db_peak) * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def test_amplitude_is_linear_in_20_db_steps() -> None:
    assert amplitude(0.0) == 1.0
    assert amplitude(-20.0) == pytest.approx(0.1)
    assert amplitude(-60.0) == pytest.approx(0.001)


def test_a_full_scale_sine_is_minus_3_dbfs() -> None:
    power = mean_square(sine(0.0))
    assert power == pytest.approx(0.5, rel=1e-3)
    assert dbfs(power, floor_db=-120.0) == pytest.approx(-3.01, abs=0.01)


def test_int16_pcm_is_measured_against_its_full_scale() -> None:
    floats = sine(-20.0)
    pcm = np.round(floats * INT16_FULL_SCALE).astype(np.int16)
    assert mean_square(pcm, INT16_FULL_SCALE) == pytest.approx(mean_square(floats), rel=1e-3)


def test_no_samples_and_silence_read_the_floor() -> None:
    assert mean_square(np.zeros(0, np.float32)) == 0.0
    assert dbfs(mean_square(np.zeros(320, np.float32)), floor_db=-90.0) == pytest.approx(-90.0)
    assert dbfs(0.0, floor_db=-200.0) == pytest.approx(-200.0)


def test_level_maps_a_db_range_onto_0_to_1_and_clamps() -> None:
    assert level(-60.0, -60.0) == 0.0
    assert level(-30.0, -60.0) == pytest.approx(0.5)
    assert level(0.0, -60.0) == 1.0
    assert level(-100.0, -60.0) == 0.0 and level(6.0, -60.0) == 1.0
    assert level(-50.0, -110.0, -10.0) == pytest.approx(0.6)


def test_block_power_leaves_out_a_partial_block() -> None:
    samples = np.concatenate([np.full(160, 0.5), np.zeros(160), np.full(100, 1.0)])
    assert block_mean_squares(samples.astype(np.float32), 160).tolist() == [0.25, 0.0]
    assert block_mean_squares(np.zeros(100, np.float32), 160).size == 0


def test_block_dbfs_per_block_with_the_floor_for_silence() -> None:
    samples = np.concatenate([sine(-10.0, 0.01), np.zeros(160, np.float32)])
    levels = block_dbfs(samples, 160, floor_db=-90.0)
    assert levels[0] == pytest.approx(-13.0, abs=0.1)  # a sine's RMS is 3 dB under its peak
    assert levels[1] == pytest.approx(-90.0)


def test_float32_stays_float32() -> None:
    samples = sine(-10.0)
    assert block_mean_squares(samples, 160).dtype == np.float32
    assert block_dbfs(samples, 160, floor_db=-90.0).dtype == np.float32
