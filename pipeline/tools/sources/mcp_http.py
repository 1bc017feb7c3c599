"""The HTTP client of a streamable-HTTP MCP server, with every response body bounded.

The SDK (``mcp`` 2.x) bounds one SSE event (``max_sse_event_size``, 1 MiB by default)
but reads a JSON response whole (``response.aread()``), and httpx2 undoes a content
coding before any bound sees the bytes. So every response passes :func:`_bound_body`,
an httpx2 response hook (which also covers a proxy taken from the environment, unlike a
transport of our own), before the SDK reads it:

- its content coding is undone here, in bounded pieces, as for HTTP tools
  (:class:`pipeline.tools.sources.http_body.BodyDecoder`), and the response then reads
  as ``identity`` to httpx2; a coding not decoded fails the read;
- a body that is not an event stream ends, past :data:`MAX_MESSAGE_BYTES` decoded, with
  :class:`ResponseRefused`. It is an ``httpx2.StreamError``, which the SDK turns into an
  error answering that one request (a JSON-RPC parse error), not the end of the
  connection. An event stream carries many messages, each bounded by the SDK's own
  limit, set to the same :data:`MAX_MESSAGE_BYTES`.

What the bounds let through is one message, at most 1 MiB decoded; the result the LLM
reads is then cut to :data:`pipeline.tools.sources.result_bounds.MAX_RESULT_BYTES`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
from mcp.client.streamable_http import DEFAULT_MAX_SSE_EVENT_SIZE

from pipeline.tools.sources.http_body import (
    ACCEPT_ENCODING,
    BodyDecodeError,
    BodyDecoder,
    UnsupportedEncoding,
)

__all__ = ["HTTP_TIMEOUT", "MAX_MESSAGE_BYTES", "ResponseRefused", "http_client"]

# One message, whichever way it comes: the SDK's bound on an SSE event (1 MiB).
MAX_MESSAGE_BYTES = DEFAULT_MAX_SSE_EVENT_SIZE
# The SDK's own defaults for its HTTP client: a call may hold its response stream open.
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class ResponseRefused(httpx2.StreamError):
    """A response body past the bound, or in a coding not decoded."""


def http_client(headers: dict[str, str]) -> httpx2.AsyncClient:
    """The client for one server: its headers, asking only for what is decoded here."""
    return httpx2.AsyncClient(
        headers={**headers, "Accept-Encoding": ACCEPT_ENCODING},
        timeout=HTTP_TIMEOUT,
        event_hooks={"response": [_bound_body]},
    )


async def _bound_body(response: httpx2.Response) -> None:
    """Read ``response`` through :class:`_BoundedStream` (see the module docstring)."""
    content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    limit = None if content_type == "text/event-stream" else MAX_MESSAGE_BYTES
    coding = response.headers.get("content-encoding", "")
    for header in ("content-encoding", "content-length"):  # both describe the raw bytes
        if header in response.headers:
            del response.headers[header]
    response.stream = _BoundedStream(response.stream, coding, limit)


class _BoundedStream(httpx2.AsyncByteStream):
    """A response's raw stream, decoded in bounded pieces, ended past ``limit`` bytes."""

    def __init__(
        self, raw: httpx2.SyncByteStream | httpx2.AsyncByteStream, coding: str, limit: int | None
    ) -> None:
        assert isinstance(raw, httpx2.AsyncByteStream)  # an AsyncClient's response
        self._raw = raw
        self._coding = coding
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            decoder = BodyDecoder(self._coding)
        except UnsupportedEncoding as exc:
            raise ResponseRefused(f"the MCP server's response: {exc}") from None
        total = 0
        async for chunk in self._raw:
            try:
                for piece in decoder.decode(chunk):
                    total += len(piece)
                    if self._limit is not None and total > self._limit:
                        raise ResponseRefused(
                            f"the MCP server's response is larger than {self._limit} bytes"
                        )
                    yield piece
            except BodyDecodeError as exc:
                raise ResponseRefused(f"the MCP server's response: {exc}") from None

    async def aclose(self) -> None:
        await self._raw.aclose()
