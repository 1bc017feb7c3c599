"""STT fallbacks (``PARLEY_STT_FALLBACK``): the next service transcribes the utterance
when one fails.

A failure is any :class:`~pipeline.services.errors.ServiceError`: no connection, a
timeout, a 5xx, a refused key, the breaker open (which refuses at once, so a service
known to be down costs no wait). The utterance's audio is the caller's own recording, so
the next service hears all of it: no words are lost. :attr:`FallbackSTT.serving` names
the service that gave the last transcript, for ``/health``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from loguru import logger

from pipeline.services.errors import ServiceError
from pipeline.services.stt import STTService, Transcript


class FallbackSTT:
    """Tries ``services`` in order (named by ``names``) until one transcribes; ``after``
    names the service they stand behind."""

    def __init__(
        self, services: Sequence[STTService], names: Sequence[str], after: str = "stt"
    ) -> None:
        if not services or len(services) != len(names):
            raise ValueError("one name per service, and at least one service")
        self.after = after
        self.services = list(services)
        self.names = list(names)
        self.serving = self.names[0]
        self.answered = 0  # utterances these fallbacks transcribed

    async def transcribe(self, pcm: np.ndarray, sample_rate: int = 16000) -> Transcript:
        last = len(self.services) - 1
        for index, (service, name) in enumerate(zip(self.services, self.names, strict=True)):
            try:
                transcript = await service.transcribe(pcm, sample_rate)
            except ServiceError as exc:
                if index == last:
                    raise
                logger.warning("STT {} failed ({}); {} transcribes the utterance", name, exc,
                               self.names[index + 1])  # fmt: skip
                continue
            self.serving = name
            self.answered += 1
            return transcript
        raise AssertionError("unreachable")
