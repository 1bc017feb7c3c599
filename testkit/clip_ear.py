"""Hearing a turn clip as an STT service would: the uploaded utterance is found in the clip
being played (by its energy envelope, which survives a trip through Opus), and the words
spoken there are returned."""

from __future__ import annotations

import io
import re
import wave
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from pipeline.audio.resampling import resample
from testkit.openai_stub import OpenAIStub
from testkit.turn_clips import TurnClip
from testkit.voices import RATE


def _envelope(audio: np.ndarray) -> np.ndarray:
    """10 ms log-energy blocks, floored at -60 dB below full scale."""
    block = RATE // 100
    usable = audio.size - audio.size % block
    x = audio[:usable].astype(np.float32).reshape(-1, block) / 32768.0
    return np.maximum(10 * np.log10(np.mean(x**2, axis=1) + 1e-12), -60.0)


def locate(utterance: np.ndarray, audio: np.ndarray) -> tuple[float, float]:
    """Where ``utterance`` (a piece cut from ``audio``, perhaps with silence around it and
    after a trip through a codec) lies in ``audio``: (start, end) seconds."""
    part, whole = _envelope(utterance), _envelope(audio)
    pad = np.full(part.size, -60.0)
    padded = np.concatenate([pad, whole, pad])
    windows = np.lib.stride_tricks.sliding_window_view(padded, part.size)
    best = int(np.argmin(np.abs(windows - part).mean(axis=1))) - part.size
    return best * 0.01, (best + part.size) * 0.01


class ClipEar:
    """The OpenAI stub's STT for a bench (``StubConfig.transcriber``): it finds the
    uploaded utterance in the clip being played and returns the words spoken there, as
    :func:`~testkit.turn_clips.perfect_words` does. ``clip`` is set before each clip
    plays; ``heard`` keeps what it returned. ``punctuation=False`` returns the words
    bare, as many streaming and telephony recognizers do ("can you tell me what the
    answer is", no final "?")."""

    def __init__(self, punctuation: bool = True) -> None:
        self.clip: TurnClip | None = None
        self.heard: list[str] = []
        self.punctuation = punctuation

    def __call__(self, wav: bytes) -> str:
        clip = self.clip
        if clip is None:
            return ""
        with wave.open(io.BytesIO(wav)) as src:
            samples = np.frombuffer(src.readframes(src.getnframes()), dtype=np.int16)
            rate = src.getframerate()
        utterance = resample(samples, rate, RATE)
        start, end = locate(utterance, clip.audio)
        text = clip.heard(start, end)
        if not self.punctuation:
            text = re.sub(r"[^\w' -]", "", text)  # a word's hyphen is spelling: "est-ce"
        self.heard.append(text)
        return text


@contextmanager
def hearing_stub(ear: ClipEar, answer: str, tts_seconds_per_char: float) -> Iterator[OpenAIStub]:
    """The OpenAI stub hearing with ``ear``, answering ``answer`` in a voice that lasts
    ``tts_seconds_per_char`` a character."""
    with OpenAIStub() as stub:
        stub.config.transcriber = ear
        stub.config.default_text = answer
        stub.config.tts_seconds_per_char = tts_seconds_per_char
        yield stub
