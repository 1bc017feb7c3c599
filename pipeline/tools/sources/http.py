"""HTTP tools: an operator turns an existing HTTP endpoint into a tool with a line of
JSON (``PARLEY_HTTP_TOOLS``), no Python needed.

A call sends the LLM's arguments as a JSON body (as query parameters for GET and DELETE,
non-scalar values JSON-encoded, ``null`` left out), and the response body is the result:
parsed JSON when the response says it is JSON, else text.

Why it is built this way:

* **One pooled client** for every tool, call and session: connections to the same
  endpoint are reused, and a busy server does not open a socket per call. What differs
  per tool (headers, timeout) goes on each request instead.
* **Nothing a call does wrong ends the conversation**: a non-2xx status, a refused
  connection or a timeout becomes an ``{"error": ...}`` result the LLM can talk about,
  with the status and the start of the body so it can tell "not found" from "down".
* **Secrets stay secret**: header values may name environment variables as ``${VAR}``,
  so tokens stay out of the JSON. They are expanded once, at start, so a missing
  variable stops the server with a clear message instead of failing every call. Header
  values never appear in a result or a log line, and since an endpoint may echo them
  back in an error body, their values are scrubbed from error text too.
* **Only what the operator declared goes out**: of the LLM's arguments, only those the
  tool's schema names (its ``properties``; all of them only where the schema says
  ``"additionalProperties": true``), and never one whose name the configured URL's query
  fixes: ``?key=...`` in the URL is the operator's, and an LLM talked into sending
  ``key`` must not replace it (nor add it to a body, which some frameworks merge with
  the query).
* **Bounded**: at most :data:`MAX_BODY_BYTES` of a body are read, *decoded*: the raw
  bytes are read and their content coding undone in bounded pieces
  (:mod:`pipeline.tools.sources.http_body`, which says why decoding and not refusing),
  so a gzip bomb stops at the bound like any long body; then the connection is dropped.
  A JSON body nested too deep is the result as text (the bounds every tool source
  shares: :mod:`pipeline.tools.sources.result_bounds`).
* **No surprises on the wire**: redirects are followed only within the same origin, as
  a redirect elsewhere would carry the tool's headers (API keys) to a host the operator
  never named; and there is no cookie jar, since the client is shared by every session
  and a cookie one caller got must not ride along on another caller's calls.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, cast

import httpx
from loguru import logger

from pipeline.tools.registry import ToolHandler, ToolSpec
from pipeline.tools.sources.config import HTTPToolConfig
from pipeline.tools.sources.http_body import (
    ACCEPT_ENCODING,
    BodyDecodeError,
    BodyDecoder,
    UnsupportedEncoding,
)
from pipeline.tools.sources.result_bounds import MAX_RESULT_BYTES, bounded, marked

__all__ = ["MAX_BODY_BYTES", "USER_AGENT", "HTTPTools", "check_http_tools"]

# The most of a (decoded) response body that is read; the rest is cut off and the result
# says so.
MAX_BODY_BYTES = MAX_RESULT_BYTES
# An error result shows the start of the body: enough for a message, not a whole page.
MAX_ERROR_CHARS = 300
_ERROR_READ_BYTES = 4096  # room for MAX_ERROR_CHARS after whitespace is collapsed
# A plain string: pipeline must not import server (where the version lives).
USER_AGENT = "parley"
MAX_REDIRECTS = 5

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Control characters would split or corrupt the header line; refuse them at start rather
# than fail each call with an error message that quotes the (secret) value.
_BAD_HEADER_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Shorter values are not scrubbed from error text: "1" or "yes" would mangle the message
# and are no secret anyway.
_MIN_SECRET_LEN = 6
_QUERY_METHODS = frozenset({"GET", "DELETE"})


@dataclass(frozen=True)
class _Tool:
    """One configured tool with its headers expanded, ready to call."""

    config: HTTPToolConfig
    headers: dict[str, str]
    secrets: tuple[str, ...]  # values to scrub from error text, longest first

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "[redacted]")
        return text


class HTTPTools:
    """The HTTP tools: one pooled httpx.AsyncClient shared by all calls and sessions."""

    def __init__(
        self, configs: Sequence[HTTPToolConfig], environ: Mapping[str, str] | None = None
    ) -> None:
        """Expands ``${VAR}`` in header values from ``environ`` (default ``os.environ``)
        now; a variable that is not set raises ValueError naming the tool, the header and
        the variable (the server then refuses to start with that message)."""
        env = os.environ if environ is None else environ
        self._tools = [_prepare(config, env) for config in configs]
        self._client = httpx.AsyncClient(
            follow_redirects=False,  # followed by hand, same origin only (see _send)
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": ACCEPT_ENCODING},
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),  # keeps none
        )

    def specs(self) -> list[ToolSpec]:
        """One ToolSpec per tool: the configured name, description and parameters (the
        schema is advertised as given), its timeout, and a handler taking the arguments."""
        return [
            ToolSpec(
                name=tool.config.name,
                description=tool.config.description,
                parameters=tool.config.parameters,
                handler=self._handler(tool),
                timeout=tool.config.timeout,
            )
            for tool in self._tools
        ]

    async def aclose(self) -> None:
        """Close the pooled connections; the tools fail (as error results) after this."""
        await self._client.aclose()

    def _handler(self, tool: _Tool) -> ToolHandler:
        # **arguments: the binding then allows any argument through; the schema's
        # "required" list is still checked by ToolSpec.bind before this runs, and only
        # what the schema names goes on the wire (_sendable).
        async def handler(**arguments: Any) -> Any:
            return await self._call(tool, arguments)

        handler.__name__ = handler.__qualname__ = tool.config.name
        return handler

    async def _call(self, tool: _Tool, arguments: dict[str, Any]) -> Any:
        config = tool.config
        request = self._request(tool, arguments)
        try:
            response = await self._send(request)
            try:
                limit = MAX_BODY_BYTES if response.is_success else _ERROR_READ_BYTES
                body, truncated = await _read(response, limit)
            finally:
                await response.aclose()
        except (UnsupportedEncoding, BodyDecodeError) as exc:
            return _failure(tool, f"HTTP {response.status_code}: {exc}")
        except httpx.TimeoutException:
            return _failure(tool, f"timed out after {config.timeout:g}s")
        except httpx.ConnectError as exc:
            return _failure(tool, f"could not connect to {request.url.host}: {exc}")
        except httpx.HTTPError as exc:
            return _failure(tool, f"request failed ({type(exc).__name__}): {exc}")
        if not response.is_success:
            # Scrubbed before it is cut, so that no cut can leave half a secret behind.
            text = tool.scrub(_decode(response, body))
            return _failure(tool, _status_message(response, text, truncated))
        return _result(response, body, truncated)

    def _request(self, tool: _Tool, arguments: dict[str, Any]) -> httpx.Request:
        config = tool.config
        url = httpx.URL(config.url)
        arguments = _sendable(config.parameters, url, arguments)
        body: dict[str, Any] = {}
        if config.method in _QUERY_METHODS:
            # Merged by hand: httpx's params= would replace the configured URL's query.
            url = url.copy_merge_params(_query(arguments))
        else:
            body["json"] = arguments  # also sets Content-Type: application/json
        return self._client.build_request(
            config.method,
            url,
            headers=tool.headers,
            # httpx's own timeout matches the runner's, which is the one that counts (it
            # covers the whole call); this one makes a stalled socket give up too.
            timeout=httpx.Timeout(config.timeout),
            **body,
        )

    async def _send(self, request: httpx.Request) -> httpx.Response:
        """The response (streaming, not read yet); redirects followed within the origin."""
        response = await self._client.send(request, stream=True)
        for _ in range(MAX_REDIRECTS):
            follow = response.next_request
            if follow is None or _origin(follow.url) != _origin(request.url):
                break  # a redirect elsewhere is left unfollowed: it becomes an error result
            await response.aclose()
            response = await self._client.send(follow, stream=True)
        return response


def check_http_tools(
    configs: Sequence[HTTPToolConfig], environ: Mapping[str, str] | None = None
) -> None:
    """Raise ValueError as :class:`HTTPTools` would (a ``${VAR}`` not set, a bad header),
    without opening a client: for a start-up check before the server runs."""
    env = os.environ if environ is None else environ
    for config in configs:
        _prepare(config, env)


def _prepare(config: HTTPToolConfig, environ: Mapping[str, str]) -> _Tool:
    headers: dict[str, str] = {}
    secrets: set[str] = set()
    for header, raw in config.headers.items():
        value, used = _expand(raw, environ, config.name, header)
        if _BAD_HEADER_CHARS.search(value):
            raise ValueError(
                f"HTTP tool {config.name}: header {header} contains a control character"
            )
        headers[header] = value
        secrets.update(s for s in (value, *used) if len(s) >= _MIN_SECRET_LEN)
    # Longest first, so a value is scrubbed whole before a part of it could be.
    return _Tool(config, headers, tuple(sorted(secrets, key=len, reverse=True)))


def _expand(
    value: str, environ: Mapping[str, str], tool: str, header: str
) -> tuple[str, list[str]]:
    """``value`` with every ``${VAR}`` replaced, and the values that went in."""
    used: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ValueError(
                f"HTTP tool {tool}: header {header} uses ${{{name}}}, "
                f"but the environment variable {name} is not set"
            )
        used.append(environ[name])
        return environ[name]

    return _ENV_REF.sub(substitute, value), used


def _sendable(
    schema: Mapping[str, Any], url: httpx.URL, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """The arguments that go on the wire (see the module docstring)."""
    properties = schema.get("properties") or {}
    more = schema.get("additionalProperties", False)
    any_name = more is True or isinstance(more, dict)
    fixed = set(url.params.keys())
    return {
        name: value
        for name, value in arguments.items()
        if (any_name or name in properties) and name not in fixed
    }


def _query(arguments: Mapping[str, Any]) -> dict[str, str]:
    # JSON spelling for scalars too (true, not True); a null is an argument not given.
    return {
        key: value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        for key, value in arguments.items()
        if value is not None
    }


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


async def _read(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the decoded body, and whether there was more; raises
    UnsupportedEncoding or BodyDecodeError. Decoded here, piece by piece, not by httpx
    (``aiter_bytes`` decodes a network chunk whole, however large it becomes)."""
    decoder = BodyDecoder(response.headers.get("content-encoding", ""))
    data = bytearray()
    # Closed on leaving early, so the generator is not left for the garbage collector.
    # cast: httpx types aiter_raw as an AsyncIterator; it is an async generator.
    raw = cast(AsyncGenerator[bytes, None], response.aiter_raw())
    async with contextlib.aclosing(raw) as chunks:
        async for chunk in chunks:
            for piece in decoder.decode(chunk):
                data += piece
                if len(data) > limit:
                    return bytes(data[:limit]), True  # the caller closes the response
    return bytes(data), False


def _decode(response: httpx.Response, body: bytes) -> str:
    # A cut may split a multi-byte character: replaced, not an exception.
    return body.decode(response.encoding or "utf-8", errors="replace")


def _result(response: httpx.Response, body: bytes, truncated: bool) -> Any:
    text = _decode(response, body)
    if truncated:
        # Cut JSON does not parse; the LLM gets the text and is told it is incomplete.
        return marked(text, MAX_BODY_BYTES)
    content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            return bounded(json.loads(text), text)  # nested too deep: the text
        except (ValueError, RecursionError):
            return text  # says JSON, is not (or too deep to parse): still what it said
    return text


def _status_message(response: httpx.Response, text: str, truncated: bool) -> str:
    message = f"HTTP {response.status_code}"
    if response.reason_phrase:
        message += f" {response.reason_phrase}"
    if response.is_redirect:
        return f"{message}: redirected to another host (or too often); not followed"
    snippet = " ".join(text.split())
    if len(snippet) > MAX_ERROR_CHARS or truncated:
        snippet = snippet[:MAX_ERROR_CHARS] + "…"
    return f"{message}: {snippet}" if snippet else message


def _failure(tool: _Tool, message: str) -> dict[str, str]:
    """The error result; the URL goes to the log only (it is the operator's business)."""
    message = tool.scrub(message)
    logger.warning(
        "HTTP tool {} ({} {}): {}", tool.config.name, tool.config.method, tool.config.url, message
    )
    return {"error": f"{tool.config.name}: {message}"}
