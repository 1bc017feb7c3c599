"""How one session's utterances become text: the STT, live or per utterance, and its
fallback.

With a live STT (:class:`~pipeline.services.live_stt.LiveSTTService`: Deepgram,
AssemblyAI) the call has one stream: every recorded frame is :meth:`Recognition.feed` to
it as it arrives, and :meth:`Recognition.request` asks for the words of all audio fed so
far (at once, so that the request covers exactly that audio). Otherwise a request sends
the utterance's audio to :meth:`~pipeline.services.stt.STTService.transcribe`. Either
way, a :class:`~pipeline.services.errors.ServiceError` sends the same audio (the
transcriber's recording) to ``fallback``, when there is one: the user's words are not
lost with the service.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
from loguru import logger

from pipeline.services.errors import ServiceError
from pipeline.services.live_stt import LiveSTTService, LiveSTTStream, Words
from pipeline.services.stt import STTService, Transcript


class Recognition:
    """One session's way from audio to text (see the module docstring)."""

    def __init__(
        self,
        stt: STTService,
        fallback: STTService | None = None,
        on_words: Callable[[Words], None] | None = None,
    ) -> None:
        self.stt = stt
        self.fallback = fallback
        self.live: LiveSTTStream | None = None
        if isinstance(stt, LiveSTTService):
            self.live = stt.open_live(on_words)
        self._carry = ""  # words a live request returned that no utterance kept
        self.fallbacks = 0  # utterances the fallback transcribed

    def feed(self, pcm: np.ndarray) -> None:
        """Recorded audio, as it is recorded (a live STT hears it now)."""
        if self.live is not None:
            self.live.send(pcm.tobytes())

    def request(self, pcm: np.ndarray, sample_rate: int) -> asyncio.Task[Transcript]:
        """The words of ``pcm`` (live: of everything fed so far, which ``pcm`` holds)."""
        loop = asyncio.get_running_loop()
        if self.live is None:
            return loop.create_task(self._answer(pcm, sample_rate, None))
        pending = asyncio.ensure_future(self.live.finalize())
        return loop.create_task(self._answer(pcm, sample_rate, pending))

    async def transcribe(self, pcm: np.ndarray, sample_rate: int) -> Transcript:
        """:meth:`request`, awaited in the caller's task (per utterance: no task hop)."""
        if self.live is not None:
            return await self.request(pcm, sample_rate)
        return await self._answer(pcm, sample_rate, None)

    def restore(self, transcript: Transcript) -> None:
        """A live request's words that no utterance kept (speech went on after the pause
        they were asked at): they open the next request's words."""
        if self.live is not None:
            self._carry = f"{self._carry} {transcript.text}".strip()

    async def close(self) -> None:
        if self.live is not None:
            await self.live.aclose()

    async def _answer(
        self, pcm: np.ndarray, sample_rate: int, pending: asyncio.Future[Transcript] | None
    ) -> Transcript:
        try:
            if pending is None:
                return await self.stt.transcribe(pcm, sample_rate)
            try:
                transcript = await pending
            finally:
                pending.cancel()  # this task cancelled: so is the wait (the words stay)
            carry, self._carry = self._carry, ""
            text = f"{carry} {transcript.text}".strip()
            return Transcript(text, transcript.language, transcript.processing)
        except ServiceError as exc:
            if self.fallback is None:
                raise
            logger.warning("transcription failed ({}); the fallback STT transcribes it", exc)
            self._carry = ""  # the recording holds those words too
            self.fallbacks += 1
            return await self.fallback.transcribe(pcm, sample_rate)
