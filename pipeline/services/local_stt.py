"""Speech-to-text on the embedded whisper tiny.en (faster-whisper, CTranslate2 int8).

Whisper is not a streaming model: it pads every input to 30 s and decodes once, so it
runs once per utterance, after the VAD's stop (see :mod:`pipeline.transcriber`). Decoding
is greedy and context-free (``beam_size=1``, ``condition_on_previous_text=False``): the
fastest setting, and one utterance has no earlier text to condition on. faster-whisper's
own no-speech rule still applies, so silence or noise gives an empty transcript.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from pipeline.services.embedded import EmbeddedModels
from pipeline.services.stt import Transcript

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

SAMPLE_RATE = 16000
_INT16_SCALE = np.float32(1.0 / 32768.0)


def to_whisper_input(pcm: np.ndarray, sample_rate: int) -> np.ndarray:
    """float32 mono 16 kHz in -1..1, from int16 or float samples at any rate."""
    samples = pcm.astype(np.float32) * _INT16_SCALE if pcm.dtype == np.int16 else pcm
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    if sample_rate != SAMPLE_RATE and samples.size:
        # Linear interpolation is enough here: the transport already delivers 16 kHz,
        # this only covers other callers.
        count = round(samples.size * SAMPLE_RATE / sample_rate)
        positions = np.linspace(0, samples.size - 1, count, dtype=np.float64)
        samples = np.interp(positions, np.arange(samples.size), samples).astype(np.float32)
    return samples


class LocalSTT:
    """:class:`~pipeline.services.stt.STTService` on the shared embedded whisper model.

    Each :class:`Transcript` carries its own ``processing``: the seconds the
    transcription took in its worker (not counting time queued behind other calls).
    """

    model = "whisper-tiny.en"

    def __init__(self, models: EmbeddedModels | None = None) -> None:
        self._models = models or EmbeddedModels.shared()

    async def transcribe(self, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> Transcript:
        whisper = await self._models.stt.get()
        text, seconds = await self._models.stt.pool.run(_transcribe, whisper, pcm, sample_rate)
        return Transcript(text, "en", seconds)


def _transcribe(whisper: WhisperModel, pcm: np.ndarray, sample_rate: int) -> tuple[str, float]:
    started = time.perf_counter()
    audio = to_whisper_input(pcm, sample_rate)
    if audio.size == 0:
        return "", 0.0
    segments, _ = whisper.transcribe(
        audio,
        language="en",
        beam_size=1,
        vad_filter=False,  # our VAD already cut the utterance
        condition_on_previous_text=False,
        without_timestamps=True,
    )
    # The segments are a generator: decoding happens here, in the worker.
    text = "".join(segment.text for segment in segments).strip()
    return text, time.perf_counter() - started
