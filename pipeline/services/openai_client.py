"""The HTTP client shared by the OpenAI-compatible services, and who closes it."""

from __future__ import annotations

import os

import openai

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
    closes) its own."""

    def __init__(
        self,
        client: openai.AsyncOpenAI | None,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
    ) -> None:
        self._owns_client = client is None
        self._client = client or make_client(base_url=base_url, api_key=api_key, timeout=timeout)

    async def aclose(self) -> None:
        """Close the HTTP client, if this service created it."""
        if self._owns_client:
            await self._client.close()
