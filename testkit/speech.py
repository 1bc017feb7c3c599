"""Speech for tests and benches: espeak-ng sentences as arrays and WAV files, placed in silence
with their true timing."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from pipeline.audio.resampling import resample
from pipeline.hearing.silero import SAMPLE_RATE


def _write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.astype(np.int16).tobytes())


def make_speech(
    folder: Path, name: str, text: str, before: float = 0.5, after: float = 1.5
) -> Path:
    """An espeak-ng WAV of ``text``, padded with silence (seconds) before and after."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        pytest.fail("espeak-ng is missing: `make test` installs it (apt-get install espeak-ng)")
    raw = folder / f"{name}.raw.wav"
    subprocess.run([espeak, "-s", "160", "-w", str(raw), text], check=True)
    with wave.open(str(raw)) as src:
        speech = resample(np.frombuffer(src.readframes(src.getnframes()), dtype=np.int16),
                          src.getframerate(), 48000)  # fmt: skip
    rate = 48000  # what browsers send; one rate for every file a test client plays
    # espeak pads its clips; trim them so the silences around the speech are exact.
    loud = np.flatnonzero(np.abs(speech.astype(np.int32)) > 300)
    if loud.size:
        speech = speech[loud[0] : loud[-1] + 1]
    silence = [np.zeros(int(rate * s), np.int16) for s in (before, after)]
    path = folder / f"{name}.wav"
    _write_wav(path, np.concatenate([silence[0], speech, silence[1]]), rate)
    return path


SENTENCE_A = "The quick brown fox jumps over the lazy dog."


SENTENCE_B = "Please call me back when you get a chance tomorrow."


def espeak(text: str, rate: int = SAMPLE_RATE) -> np.ndarray:
    """A sentence as int16 samples at ``rate`` (16 kHz unless told; espeak-ng writes
    22050 Hz)."""
    binary = shutil.which("espeak-ng")
    if binary is None:
        pytest.fail("espeak-ng is missing: apt-get install espeak-ng")
    wav = subprocess.run([binary, "--stdout", text], check=True, capture_output=True).stdout
    with wave.open(io.BytesIO(wav)) as src:
        source_rate = src.getframerate()
        samples = np.frombuffer(src.readframes(src.getnframes()), dtype=np.int16)
    return resample(samples, source_rate, rate)


@dataclass
class Timeline:
    samples: np.ndarray  # int16
    truth: list[tuple[float, float]]  # (onset, end) of each sentence, seconds from 0


def timeline(*parts: float | np.ndarray) -> Timeline:
    """Silences (seconds) and clips in order, with each clip's true onset and end.

    Clips are trimmed to their sound, so the silences are the true pauses."""
    chunks: list[np.ndarray] = []
    truth: list[tuple[float, float]] = []
    position = 0
    for part in parts:
        if isinstance(part, np.ndarray):
            loud = np.flatnonzero(np.abs(part.astype(np.int32)) > 0.01 * np.abs(part).max())
            chunk = part[loud[0] : loud[-1] + 1].astype(np.int16)
            truth.append((position / SAMPLE_RATE, (position + chunk.size) / SAMPLE_RATE))
        else:
            chunk = np.zeros(round(part * SAMPLE_RATE), np.int16)
        chunks.append(chunk)
        position += chunk.size
    return Timeline(np.concatenate(chunks), truth)


def at_level(samples: np.ndarray, dbfs: float) -> np.ndarray:
    """Scale to an RMS level (over the non-silent part) in dBFS, as int16."""
    x = samples.astype(np.float64)
    rms = np.sqrt(np.mean(x[np.abs(x) > 0] ** 2))
    return np.clip(np.round(x / rms * 32768 * 10 ** (dbfs / 20)), -32768, 32767).astype(np.int16)


def pink(rng: np.random.Generator, size: int) -> np.ndarray:
    """Pink noise (power falling as 1/f): closer to room noise than white."""
    spectrum = np.fft.rfft(rng.standard_normal(size))
    spectrum /= np.sqrt(np.maximum(np.arange(spectrum.size), 1))
    return np.fft.irfft(spectrum, size)
