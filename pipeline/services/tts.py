"""The TTS interface: text in, mono int16 audio chunks out, as soon as they exist."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

import numpy as np


class TTSService(Protocol):
    """Synthesizes one sentence. Closing the iterator early must stop the synthesis."""

    sample_rate: int

    def synthesize(self, text: str) -> AsyncIterator[np.ndarray]: ...
