"""The STT interface: one utterance of 16 kHz mono int16 audio in, its text out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

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
