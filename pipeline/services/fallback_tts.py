"""TTS fallbacks (``PARLEY_TTS_FALLBACK``): the next voice speaks the sentence when one
fails before its first audio.

A failure is any :class:`~pipeline.services.errors.ServiceError` before the sentence's
first audio (no connection, a refused key, a timeout, a 5xx, the breaker open, which
refuses at once); after audio has gone out the sentence cannot be taken back, and the
failure ends it as it would without a fallback. The first service may be a live voice
(one connection per call, each answer a context, :mod:`pipeline.services.live_tts`);
the fallbacks speak one sentence per request. Their audio is resampled to the first
service's rate, so the output sees one voice's format. :attr:`FallbackTTS.serving`
names who spoke the last sentence, for ``/health``. A voice that failed a call is not
asked again within the answer, nor by the call's answers for ``RETRY_SECONDS``: each try
at a dead voice would cost the caller its timeout in silence. A live voice whose
connection cannot be opened is not asked at all: its connection is tried again in the
background every ``RETRY_SECONDS``, and the voice speaks again once one opens. Its circuit
breaker keeps the other calls from trying it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing

import numpy as np
from loguru import logger

from pipeline.audio.resampling import StreamResampler
from pipeline.services.closable import ClosableStream
from pipeline.services.errors import ServiceError
from pipeline.services.live_tts import LiveTTSService, SpokenText, TTSConnection, TTSContext
from pipeline.services.tts import TTSService

RETRY_SECONDS = 30.0  # a call's answers skip a voice that failed it for this long


class FallbackTTS:
    """Tries ``services`` in order (named by ``names``) for each sentence."""

    def __init__(self, services: Sequence[TTSService], names: Sequence[str]) -> None:
        if len(services) < 2 or len(services) != len(names):
            raise ValueError("one name per service, and at least two services")
        self.services = list(services)
        self.names = list(names)
        self.sample_rate = services[0].sample_rate
        self.model = str(getattr(services[0], "model", "") or "")
        self.serving = self.names[0]
        self.answered = 0  # sentences the fallbacks spoke

    def open_live(self) -> FallbackConnection:
        first = self.services[0]
        return FallbackConnection(
            self, first.open_live() if isinstance(first, LiveTTSService) else None
        )

    async def synthesize(self, text: str) -> AsyncGenerator[np.ndarray, None]:
        async with aclosing(self.speak(text, None)) as audio:
            async for pcm in audio:
                yield pcm

    async def speak(
        self, text: str, first: TTSContext | None, skip: int = 0
    ) -> AsyncGenerator[np.ndarray, None]:
        """``text`` by the first service that gives audio (``first``: the call's live
        context of the first service, if it has one), from service ``skip`` on."""
        async with aclosing(self.speak_from(text, first, skip, [])) as audio:
            async for pcm in audio:
                yield pcm

    async def speak_from(
        self, text: str, first: TTSContext | None, skip: int, served: list[int]
    ) -> AsyncGenerator[np.ndarray, None]:
        """:meth:`speak`; ``served`` gets the index of the service that spoke."""
        last = len(self.services) - 1
        for index, service in enumerate(self.services):
            if index < skip:
                continue
            if index == 0 and first is not None:
                stream: ClosableStream[np.ndarray] = first.say(
                    text if isinstance(text, SpokenText) else SpokenText(text)
                )
            else:
                stream = service.synthesize(str(text))
            spoken = False
            # One resampler for the sentence: no samples lost between its chunks.
            same = service.sample_rate == self.sample_rate
            resampler = None if same else StreamResampler(self.sample_rate)
            try:
                async with aclosing(stream) as audio:
                    async for pcm in audio:
                        if not spoken:
                            spoken = True
                            self._served(index)
                            served.append(index)
                        if resampler is not None:
                            data = resampler.resample(pcm, service.sample_rate)
                            pcm = np.frombuffer(data, dtype=np.int16)
                        yield pcm
                return
            except ServiceError as exc:
                if spoken or index == last:
                    raise
                logger.warning("TTS {} failed ({}); {} speaks the sentence", self.names[index],
                               exc, self.names[index + 1])  # fmt: skip

    def _served(self, index: int) -> None:
        self.serving = self.names[index]
        self.answered += index > 0


class FallbackConnection:
    """One call: the first service's live connection (if it has one) and the fallbacks."""

    def __init__(self, owner: FallbackTTS, first: TTSConnection | None) -> None:
        self.owner = owner
        self.first = first
        self.sample_rate = owner.sample_rate
        self.model = owner.model
        self.skip, self.skip_until = 0, 0.0
        self.probe_at = time.monotonic() + RETRY_SECONDS  # the call's start just tried

    def context(self) -> FallbackContext:
        skip = self.skip if time.monotonic() < self.skip_until else 0
        skip = max(skip, 1) if self.first_down() else skip
        return FallbackContext(self, self.first.context() if self.first else None, skip)

    def first_down(self) -> bool:
        """Whether the first voice's latest connect failed; if so, it is tried again in
        the background now and then (every ``RETRY_SECONDS``), not by a sentence."""
        first = self.first
        if first is None or getattr(first, "down", None) is None:
            return False
        now = time.monotonic()
        if now >= self.probe_at and hasattr(first, "probe"):
            self.probe_at = now + RETRY_SECONDS
            first.probe()
        return True

    def failed_over(self, served: int) -> None:
        """Service ``served`` spoke after those before it failed: the call's next answers
        start there for a while (each try at a dead voice costs its timeout in silence)."""
        self.skip, self.skip_until = served, time.monotonic() + RETRY_SECONDS

    async def aclose(self) -> None:
        if self.first is not None:
            await self.first.aclose()


class FallbackContext:
    """One answer: each sentence to the first service's context, or to a fallback. A
    voice that failed once in the answer is not asked again within it: each retry
    would cost the caller its timeout in silence between the sentences."""

    def __init__(self, call: FallbackConnection, first: TTSContext | None, skip: int) -> None:
        self.call = call
        self.first = first
        self._skip = skip  # services not asked in this answer, from the first

    async def say(self, text: SpokenText) -> AsyncGenerator[np.ndarray, None]:
        if not self._skip and self.call.first_down():
            self._skip = 1  # the call's voice cannot connect: no sentence waits for it
        served: list[int] = []
        try:
            speech = self.call.owner.speak_from(text, self.first, self._skip, served)
            async with aclosing(speech) as audio:
                async for pcm in audio:
                    yield pcm
        finally:
            if served and served[0] > self._skip:
                self._skip = served[0]
                self.call.failed_over(served[0])

    def close(self) -> None:
        if self.first is not None:
            self.first.close()

    def cancel(self) -> None:
        if self.first is not None:
            self.first.cancel()
