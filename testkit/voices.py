"""The voices the turn clips are spoken in: ``hibari`` (the embedded neural voice, English
only), ``espeak`` (espeak-ng, en-us), ``espeak-gb`` (en-gb, a third voice for the bench)
and ``espeak-es`` / ``espeak-fr`` / ``espeak-de`` (espeak-ng's Spanish, French and German,
for the other languages' sets). Audio is 16 kHz mono int16, trimmed to its sound."""

from __future__ import annotations

import io
import shutil
import subprocess
import threading
import wave
from functools import cache

import numpy as np

from pipeline.audio.resampling import resample
from pipeline.services.embedded import HIBARI
from pipeline.services.local_tts import normalise

RATE = 16000


def _espeak(text: str, voice: str) -> np.ndarray:
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise RuntimeError(
            "espeak-ng is missing: `make test` installs it (apt-get install espeak-ng)"
        )
    wav = subprocess.run(
        [binary, "-v", voice, "-s", "160", "--stdout", text], check=True, capture_output=True
    ).stdout
    with wave.open(io.BytesIO(wav)) as src:
        rate = src.getframerate()
        samples = np.frombuffer(src.readframes(src.getnframes()), dtype=np.int16)
    return resample(samples, rate, RATE)


# Our voice names → espeak-ng's.
ESPEAK_VOICES = {"espeak-gb": "en-gb", "espeak-es": "es", "espeak-fr": "fr", "espeak-de": "de"}

_hibari_lock = threading.Lock()


@cache
def _hibari_model():
    from hibari import Hibari

    return Hibari(voice="heart", model=str(HIBARI.locate()), threads=1)


def _hibari(text: str) -> np.ndarray:
    with _hibari_lock:
        tts = _hibari_model()
        # A fixed seed: the same clip every run.
        audio = np.concatenate(list(tts.stream(text, seed=7)))
    return resample(normalise(audio), tts.sample_rate, RATE)


def render(text: str, voice: str) -> np.ndarray:
    """``text`` spoken by ``voice``, trimmed to its sound, 16 kHz int16."""
    if voice == "hibari":
        audio = _hibari(text)
    elif voice == "espeak":
        audio = _espeak(text, "en-us")
    elif voice in ESPEAK_VOICES:
        audio = _espeak(text, ESPEAK_VOICES[voice])
    else:
        raise ValueError(f"unknown voice {voice!r}")
    return trim(audio)


def trim(audio: np.ndarray, threshold: int = 300) -> np.ndarray:
    loud = np.flatnonzero(np.abs(audio.astype(np.int32)) > threshold)
    return audio[loud[0] : loud[-1] + 1] if loud.size else audio
