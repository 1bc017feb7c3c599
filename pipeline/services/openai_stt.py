"""Speech-to-text through an OpenAI-compatible ``/audio/transcriptions`` endpoint.

One utterance per request, sent as a WAV made in memory. A failed request is sent
again (after 0.2 s, 0.4 s...) only when the error is retryable: connection problems,
timeouts, 429 and 5xx; never a refused key or a rejected request. ``timeout`` bounds the
connect and each read of one attempt; ``total_timeout`` (if set) the whole transcription,
retries included, since a user is waiting for the answer.
"""

from __future__ import annotations

import asyncio
import io
import wave

import numpy as np
import openai

from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import bad_response, map_error, timed_out, with_retries
from pipeline.services.openai_client import OpenAIEndpoint
from pipeline.services.stt import Transcript

SERVICE = "stt"


def wav_bytes(pcm: np.ndarray, sample_rate: int) -> bytes:
    """Mono int16 PCM as a WAV file's bytes."""
    if pcm.dtype != np.int16:
        raise ValueError(f"expected int16 PCM, got {pcm.dtype}")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm.reshape(-1).astype("<i2", copy=False).tobytes())
    return buffer.getvalue()


class OpenAISTT(OpenAIEndpoint):
    """Transcribes whole utterances; see the module docstring for the timeouts."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        language: str | None = None,
        timeout: float = 10.0,
        retries: int = 2,
        retry_delay: float = 0.2,
        client: openai.AsyncOpenAI | None = None,
        breaker: CircuitBreaker | None = None,
        total_timeout: float | None = None,
    ) -> None:
        self.model = model
        self.language = language
        self.retries = retries
        self.retry_delay = retry_delay
        self.total_timeout = total_timeout
        super().__init__(
            client, base_url=base_url, api_key=api_key, timeout=timeout, breaker=breaker
        )

    async def transcribe(self, pcm: np.ndarray, sample_rate: int = 16000) -> Transcript:
        audio = wav_bytes(pcm, sample_rate)
        attempts = 0

        async def attempt() -> Transcript:
            nonlocal attempts
            if attempts:
                self.admit_retry()  # others' failures may have opened the breaker meanwhile
            attempts += 1
            extra = {"language": self.language} if self.language else {}
            try:
                result = await self._client.audio.transcriptions.create(
                    file=("audio.wav", audio, "audio/wav"), model=self.model, **extra
                )
            except Exception as exc:
                raise map_error(exc, SERVICE) from exc
            text = getattr(result, "text", None)
            if not isinstance(text, str):
                raise bad_response(SERVICE, "the answer had no text")
            return Transcript(text.strip(), self.language)

        # The whole call, retries included, is one outcome for the breaker.
        with self.guarded():
            try:
                async with asyncio.timeout(self.total_timeout):
                    return await with_retries(
                        attempt, SERVICE, retries=self.retries, base_delay=self.retry_delay
                    )
            except TimeoutError:
                # The deadline cut the call: a ServiceError, so it counts as its failure.
                raise timed_out(SERVICE, f"no transcript within {self.total_timeout:g} s") from None
