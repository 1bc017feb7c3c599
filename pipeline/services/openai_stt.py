"""Speech-to-text through an OpenAI-compatible ``/audio/transcriptions`` endpoint.

One utterance per request, sent as a WAV made in memory. A failed request is sent
again as ``retry`` (a :class:`~pipeline.services.retry.RetryPolicy`) allows: only when
the error is retryable (connection problems, timeouts, 429 and 5xx), never for a refused
key or a rejected request. ``timeout`` bounds the connect and each read of one attempt;
``total_timeout`` (if set) the whole transcription, retries included, since a user is
waiting for the answer.
"""

from __future__ import annotations

import asyncio
import io
import wave

import numpy as np
import openai

from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import bad_response, timed_out
from pipeline.services.openai_client import OpenAIEndpoint
from pipeline.services.retry import RetryPolicy
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
        retry: RetryPolicy | None = None,
        client: openai.AsyncOpenAI | None = None,
        breaker: CircuitBreaker | None = None,
        total_timeout: float | None = None,
    ) -> None:
        self.model = model
        self.language = language
        self.retry = retry or RetryPolicy()
        self.total_timeout = total_timeout
        super().__init__(
            client, base_url=base_url, api_key=api_key, timeout=timeout, breaker=breaker
        )

    async def transcribe(self, pcm: np.ndarray, sample_rate: int = 16000) -> Transcript:
        audio = wav_bytes(pcm, sample_rate)

        async def attempt() -> Transcript:
            result = await self._client.audio.transcriptions.create(
                file=("audio.wav", audio, "audio/wav"),
                model=self.model,
                language=self.language or openai.omit,  # omit: the field is not sent
            )
            text = getattr(result, "text", None)
            if not isinstance(text, str):
                raise bad_response(SERVICE, "the answer had no text")
            return Transcript(text.strip(), self.language)

        # The whole call, retries included, is one outcome for the breaker.
        with self.guarded():
            try:
                async with asyncio.timeout(self.total_timeout):
                    # Others' failures may open the breaker meanwhile: it refuses retries.
                    return await self.retry.call(attempt, SERVICE, before_retry=self.admit_retry)
            except TimeoutError:
                # The deadline cut the call: a ServiceError, so it counts as its failure.
                raise timed_out(SERVICE, f"no transcript within {self.total_timeout:g} s") from None
