"""The HTTP client shared by the OpenAI-compatible services, who closes it, and the
circuit breaker that watches each service's requests."""

from __future__ import annotations

import contextlib
import os

import openai

from pipeline.services import llm_calls
from pipeline.services.circuit import CircuitBreaker

# Sent when no key is configured: a keyless local server accepts it, a real provider
# answers 401, which becomes a clear authentication error.
NO_KEY = "no-key-configured"


def make_client(*, base_url: str | None, api_key: str | None, timeout: float) -> openai.AsyncOpenAI:
    """An ``AsyncOpenAI`` without the SDK's own retries (each service decides its own)."""
    return openai.AsyncOpenAI(
        base_url=base_url,
        api_key=api_key or os.environ.get("OPENAI_API_KEY") or NO_KEY,
        timeout=timeout,
        max_retries=0,
    )


class OpenAIEndpoint:
    """Base of the OpenAI-compatible services: uses the given client, or makes (and later
    closes) its own; reports each request's outcome to ``breaker``, when there is one."""

    def __init__(
        self,
        client: openai.AsyncOpenAI | None,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self._owns_client = client is None
        self._client = client or make_client(base_url=base_url, api_key=api_key, timeout=timeout)
        self.breaker = breaker

    def guarded(self) -> contextlib.AbstractContextManager[None]:
        """One call, retries included, as :func:`pipeline.services.llm_calls.guarded`
        counts it for ``breaker`` (a refusal while open, a failure, a success, or neither).
        Each retry inside it calls :meth:`admit_retry` first."""
        return llm_calls.guarded(self.breaker)

    def admit_retry(self) -> None:
        """Before a retry inside :meth:`guarded`: refused if the breaker opened since."""
        if self.breaker is not None:
            self.breaker.check_retry()

    async def aclose(self) -> None:
        """Close the HTTP client, if this service created it."""
        if self._owns_client:
            await self._client.close()
