"""Text-to-speech through an OpenAI-compatible ``/audio/speech`` endpoint, streamed.

Asks for raw PCM (s16le, mono, ``sample_rate`` Hz: 24 kHz for OpenAI) and yields it as
int16 arrays as the bytes arrive; a sample split across two network chunks is carried
over. A failure before any audio was yielded is retried (after 0.2 s, 0.4 s...) when
retryable; once audio has gone out a failure raises, since a retry would repeat it.
Closing the iterator early closes the response.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import openai

from pipeline.services.errors import backoff, map_error
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
    """Synthesizes one text per request; ``timeout`` bounds the connect and each read."""

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
    ) -> None:
        self.model = model
        self.voice = voice
        self.sample_rate = sample_rate
        self.retries = retries
        self.retry_delay = retry_delay
        super().__init__(client, base_url=base_url, api_key=api_key, timeout=timeout)

    async def synthesize(self, text: str) -> AsyncIterator[np.ndarray]:
        attempt = 0
        started = False
        while True:
            try:
                async with self._client.audio.speech.with_streaming_response.create(
                    model=self.model, voice=self.voice, input=text, response_format="pcm"
                ) as response:
                    decoder = PCMDecoder()
                    async for data in response.iter_bytes():
                        pcm = decoder.feed(data)
                        if pcm is not None:
                            started = True
                            yield pcm
                return
            except Exception as exc:
                error = map_error(exc, SERVICE, mid_stream=started)
                if started or not error.retryable or attempt >= self.retries:
                    raise error from exc
            await asyncio.sleep(backoff(attempt, self.retry_delay))
            attempt += 1
