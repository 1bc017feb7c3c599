"""Text-to-speech through an OpenAI-compatible ``/audio/speech`` endpoint, streamed.

Asks for raw PCM (s16le, mono, ``sample_rate`` Hz: 24 kHz for OpenAI) and yields it as
int16 arrays as the bytes arrive; a sample split across two network chunks is carried
over. A request that fails before its first audio is sent again as ``retry`` (a
:class:`~pipeline.services.retry.RetryPolicy`, whose ``deadline`` bounds the time
before the first audio) allows; once audio has gone out a failure raises, since a retry
would repeat it. An answer that is not audio (a JSON or text body with status 200) is a
bad response, not noise to play. Closing the iterator early closes the response.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

import numpy as np
import openai

from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import bad_response, map_error
from pipeline.services.openai_client import OpenAIEndpoint
from pipeline.services.retry import RetryPolicy

SERVICE = "tts"


class PCMDecoder:
    """Turns a byte stream into int16 arrays, keeping an odd trailing byte for later."""

    def __init__(self) -> None:
        self._carry = b""

    def feed(self, data: bytes) -> np.ndarray | None:
        data = self._carry + data
        usable = len(data) - len(data) % 2
        self._carry = data[usable:]
        if not usable:
            return None
        # astype copies: the frombuffer view is read-only and tied to ``data``.
        return np.frombuffer(data[:usable], dtype="<i2").astype(np.int16)


class OpenAITTS(OpenAIEndpoint):
    """Synthesizes one text per request; ``timeout`` bounds the connect and each read,
    ``retry.deadline`` the time retries may take before the first audio."""

    def __init__(
        self,
        model: str,
        voice: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        sample_rate: int = 24000,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        client: openai.AsyncOpenAI | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.model = model
        self.voice = voice
        self.sample_rate = sample_rate
        self.retry = retry or RetryPolicy()
        super().__init__(
            client, base_url=base_url, api_key=api_key, timeout=timeout, breaker=breaker
        )

    async def synthesize(self, text: str) -> AsyncGenerator[np.ndarray, None]:
        with self.guarded():  # the sentence, retries included, is one outcome for the breaker
            # Retried until the first audio; others' failures may open the breaker meanwhile.
            chunks, first = await self.retry.call(
                lambda: self._first_audio(text), SERVICE, before_retry=self.admit_retry
            )
            async with aclosing(chunks):
                if first is not None:
                    yield first
                    async for pcm in chunks:
                        yield pcm

    async def _first_audio(
        self, text: str
    ) -> tuple[AsyncGenerator[np.ndarray, None], np.ndarray | None]:
        """One request, up to its first audio (None: it had none); the rest to come."""
        chunks = self._attempt(text)
        try:
            return chunks, await anext(chunks, None)
        except BaseException:
            await chunks.aclose()
            raise

    async def _attempt(self, text: str) -> AsyncGenerator[np.ndarray, None]:
        """One request; errors come out as :class:`ServiceError` (for the breaker)."""
        yielded = False
        try:
            async with self._client.audio.speech.with_streaming_response.create(
                model=self.model, voice=self.voice, input=text, response_format="pcm"
            ) as response:
                kind = response.headers.get("content-type", "")
                if kind.startswith(("application/json", "text/")):
                    raise bad_response(SERVICE, f"the answer was not audio ({kind})")
                decoder = PCMDecoder()
                async for data in response.iter_bytes():
                    pcm = decoder.feed(data)
                    if pcm is not None:
                        yielded = True
                        yield pcm
        except Exception as exc:
            raise map_error(exc, SERVICE, mid_stream=yielded) from exc
