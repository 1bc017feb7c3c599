"""The TTS interface: text in, mono int16 audio chunks out, as soon as they exist."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from pipeline.services.closable import ClosableStream


class TTSService(Protocol):
    """Synthesizes one sentence. Closing the iterator early must stop the synthesis."""

    sample_rate: int

    def synthesize(self, text: str) -> ClosableStream[np.ndarray]: ...
