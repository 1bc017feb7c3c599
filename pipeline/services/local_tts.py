"""Text-to-speech on the embedded hibari voice ("heart", 24 kHz), level-normalised.

hibari synthesizes one sentence per model run (~25 ms for a 3 s sentence here) and
yields each as soon as it is done. Its raw output is quiet and varies per sentence
(speech around -24 dBFS, peaks 0.25..0.45), so every chunk is scaled to one speech
level before it is converted to int16 (see :func:`normalise`), after its silent padding
is trimmed (see :func:`trim_silence`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING

import numpy as np

from pipeline.audio.levels import amplitude, block_mean_squares, mean_square
from pipeline.services.embedded import EmbeddedModels

if TYPE_CHECKING:
    from hibari import Hibari

SAMPLE_RATE = 24000

# Level target: -20 dBFS RMS over the voiced part, the usual level for speech on a call
# (loud enough next to other voices, 20 dB of headroom for peaks), and peaks kept at or
# below -1 dBFS so the scaled audio never clips. Measured on hibari's output, the peak
# ceiling binds only for a few sentences with strong plosives.
TARGET_RMS_DBFS = -20.0
PEAK_CEILING_DBFS = -1.0
# A chunk of near silence (a lone breath) must not be boosted into noise.
MAX_GAIN_DB = 18.0
# Voiced part: 20 ms blocks louder than this count towards the speech level.
_BLOCK = SAMPLE_RATE // 50
_VOICED_DBFS = -45.0


def speech_rms(samples: np.ndarray) -> float:
    """RMS of the voiced 20 ms blocks of float samples (0.0 for silence)."""
    if samples.size < _BLOCK:  # a chunk shorter than a block is one block
        power = np.array([mean_square(samples)])
    else:
        power = block_mean_squares(samples, _BLOCK)
    voiced = power[power > amplitude(_VOICED_DBFS) ** 2]
    return math.sqrt(float(voiced.mean())) if voiced.size else 0.0


def normalise(samples: np.ndarray) -> np.ndarray:
    """float samples in -1..1 → int16 at :data:`TARGET_RMS_DBFS` speech level, with
    peaks at most :data:`PEAK_CEILING_DBFS` and gain at most :data:`MAX_GAIN_DB`."""
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    rms = speech_rms(samples)
    peak = float(np.max(np.abs(samples))) if samples.size else 0.0
    gain = amplitude(MAX_GAIN_DB)
    if rms > 0.0:
        gain = min(gain, amplitude(TARGET_RMS_DBFS) / rms)
    if peak > 0.0:
        gain = min(gain, amplitude(PEAK_CEILING_DBFS) / peak)
    scaled = samples * np.float32(gain * 32767.0)
    return np.clip(np.rint(scaled), -32768, 32767).astype(np.int16)


# hibari pads each sentence with ~250 ms of silence before and ~400 ms after. The lead
# is pure latency (the user waits for it), so it is cut to a few ms; the tail is cut to
# a natural pause between sentences.
LEAD_SECONDS = 0.01
TAIL_SECONDS = 0.15
_SILENT = 1e-3  # about -60 dBFS


def trim_silence(samples: np.ndarray) -> np.ndarray:
    """float samples with the padding before and after the speech cut down to
    :data:`LEAD_SECONDS` and :data:`TAIL_SECONDS`."""
    sound = np.flatnonzero(np.abs(samples) > _SILENT)
    if sound.size == 0:
        return samples[:0]
    start = max(0, int(sound[0]) - int(LEAD_SECONDS * SAMPLE_RATE))
    end = min(samples.size, int(sound[-1]) + 1 + int(TAIL_SECONDS * SAMPLE_RATE))
    return samples[start:end]


class LocalTTS:
    """:class:`~pipeline.services.tts.TTSService` on the shared embedded hibari voice.

    Synthesis runs in the TTS pool. Closing the iterator early (barge-in) stops it
    before the next sentence; the sentence in progress finishes (one model run, tens
    of milliseconds) and its worker is then free.
    """

    model = "hibari-heart"
    sample_rate = SAMPLE_RATE

    def __init__(self, models: EmbeddedModels | None = None) -> None:
        self._models = models or EmbeddedModels.shared()

    async def synthesize(self, text: str) -> AsyncGenerator[np.ndarray, None]:
        if not text.strip():
            return
        tts = await self._models.tts.get()
        produce = _producer(tts, text)
        async with aclosing(self._models.tts.pool.stream(produce)) as chunks:
            async for pcm in chunks:
                yield pcm


def _producer(
    tts: Hibari, text: str
) -> Callable[[Callable[[np.ndarray], None], threading.Event], None]:
    def produce(emit: Callable[[np.ndarray], None], stop: threading.Event) -> None:
        for chunk in tts.stream(text):
            if stop.is_set():
                return
            speech = trim_silence(np.asarray(chunk, dtype=np.float32).reshape(-1))
            if speech.size:
                emit(normalise(speech))

    return produce
