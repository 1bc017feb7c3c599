"""The STT interface: one utterance of 16 kHz mono int16 audio in, its text out.

A service that can also follow an utterance while it is spoken implements
:class:`StreamingSTTService` (the embedded whisper does; the OpenAI-compatible client
does not, and keeps the per-utterance path): the transcriber then opens one
:class:`STTStream` per utterance, runs interim passes on it while the user speaks and
asks it for the final text at the VAD's stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True, slots=True)
class Transcript:
    """One utterance's text. ``processing``: seconds the model itself worked on it (not
    counting time queued behind other calls), when the service knows; per call, as one
    service serves every session."""

    text: str
    language: str | None = None
    processing: float | None = None


class STTService(Protocol):
    """Transcribes one whole utterance (per-utterance, not streaming)."""

    async def transcribe(self, pcm: np.ndarray, sample_rate: int = 16000) -> Transcript: ...


class STTStream(Protocol):
    """One utterance, transcribed while it is spoken.

    :meth:`interim` takes the whole recording so far (each call a longer one) and
    returns the text committed so far, or None when the pass was skipped because the
    service's workers are busy (interim passes never wait for them). :meth:`finish`
    takes the whole utterance and returns its final text, which starts with the
    committed words. Call them one at a time.
    """

    @property
    def committed(self) -> str: ...

    def idle(self) -> bool:
        """Whether an interim pass now would start at once (cheap: a few counters)."""
        ...

    async def interim(self, pcm: np.ndarray, sample_rate: int = 16000) -> str | None: ...

    async def finish(self, pcm: np.ndarray, sample_rate: int = 16000) -> Transcript: ...


@runtime_checkable
class StreamingSTTService(STTService, Protocol):
    """An :class:`STTService` that can also open a per-utterance :class:`STTStream`."""

    def open_stream(self) -> STTStream: ...

    def idle(self) -> bool:
        """Whether a call now would start at once (a local model's workers are free)."""
        ...
