"""Text-to-speech through an OpenAI-compatible ``/audio/speech`` endpoint, streamed.

Asks for raw PCM (s16le, mono, ``sample_rate`` Hz: 24 kHz for OpenAI) and yields it as
int16 arrays as the bytes arrive; a sample split across two network chunks is carried
over. A failure before any audio was yielded is retried (after 0.2 s, 0.4 s...) when
retryable and ``total_timeout`` (if set) has not passed since the first attempt; once
audio has gone out a failure raises, since a retry would repeat it. An answer that is not
audio (a JSON or text body with status 200) is a bad response, not noise to play.
Closing the iterator early closes the response.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing

import numpy as np
import openai

from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import backoff, bad_response, map_error
from pipeline.services.openai_client import OpenAIEndpoint

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
    ``total_timeout`` the time retries may take before the first audio."""

    def __init__(
        self,
        model: str,
        voice: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        sample_rate: int = 24000,
        timeout: float = 10.0,
        retries: int = 2,
        retry_delay: float = 0.2,
        client: openai.AsyncOpenAI | None = None,
        breaker: CircuitBreaker | None = None,
        total_timeout: float | None = None,
    ) -> None:
        self.model = model
        self.voice = voice
        self.sample_rate = sample_rate
        self.retries = retries
        self.retry_delay = retry_delay
        self.total_timeout = total_timeout
        super().__init__(
            client, base_url=base_url, api_key=api_key, timeout=timeout, breaker=breaker
        )

    async def synthesize(self, text: str) -> AsyncIterator[np.ndarray]:
        attempt = 0
        started = False
        loop = asyncio.get_running_loop()
        give_up = loop.time() + (self.total_timeout or float("inf"))
        with self.guarded():  # the sentence, retries included, is one outcome for the breaker
            while True:
                if attempt:
                    self.admit_retry()  # others' failures may have opened the breaker meanwhile
                try:
                    async with aclosing(self._attempt(text)) as chunks:
                        async for pcm in chunks:
                            started = True
                            yield pcm
                    return
                except Exception as exc:
                    error = map_error(exc, SERVICE, mid_stream=started)
                    delay = backoff(attempt, self.retry_delay)
                    late = loop.time() + delay > give_up
                    if started or not error.retryable or attempt >= self.retries or late:
                        raise error from exc
                await asyncio.sleep(delay)
                attempt += 1

    async def _attempt(self, text: str) -> AsyncIterator[np.ndarray]:
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
