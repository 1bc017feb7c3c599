"""A fake of Anthropic's Messages API on 127.0.0.1, for tests: real HTTP, so the official
``anthropic`` SDK is exercised end to end (what proves the fake faithful).

``POST /v1/messages`` answers ``stream: true`` with the documented server-sent events
(``message_start``, ``ping``, per block ``content_block_start`` / ``content_block_delta``
(``thinking_delta`` + ``signature_delta``, ``text_delta``, ``input_json_delta``) /
``content_block_stop``, then ``message_delta`` (stop reason, usage) and
``message_stop``), and otherwise with one JSON message. It checks the key (the
documented ``x-api-key``, or ``Authorization: Bearer`` as SDK 2.x sends it) and the
``anthropic-version`` header and the request's shape as the API does (roles that
alternate from user, tool results right after their calls): a faulty request gets the
API's 400 answer, so a test sees what the real API would refuse.

    with AnthropicStub() as stub:                        # or the ``anthropic_stub`` fixture
        stub.script(Reply("Hi there."),                  # text in word-sized deltas
                    Reply(("Hi", " there.")),            # ...or in exactly these
                    Reply(tool_calls=(ToolUse("get_weather", {"city": "Paris"}),)),
                    Reply("Sunny.", thinking="The user wants weather."),
                    Reply("Slow.", first_delay=2.0, chunk_delay=0.05),
                    Fault.http(529),                     # Anthropic's error JSON body
                    Fault.midstream("overloaded_error", after=2))
        ... AnthropicLLM("claude-x", base_url=stub.url, api_key=stub.api_key) ...
        stub.requests[-1].body["messages"]; stub.requests[-1].disconnected

Each request takes the next scripted item; an empty script answers ``default_text``.
Delays end early when the client disconnects (the record says so) or the stub stops.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from testkit.thread_server import serve_in_thread

# The error type the API sends with each status (https://docs.anthropic.com/en/api/errors).
ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
    429: "rate_limit_error", 500: "api_error", 504: "timeout_error", 529: "overloaded_error",
}  # fmt: skip
MESSAGES = {"authentication_error": "invalid x-api-key", "overloaded_error": "Overloaded"}


@dataclass(frozen=True)
class ToolUse:
    """A scripted tool call; ``input`` as a string is sent verbatim (bad JSON too)."""

    name: str
    input: dict[str, Any] | str = field(default_factory=dict)
    id: str = ""  # default: toolu_stub_<n>


@dataclass(frozen=True)
class Reply:
    """A scripted answer: thinking, text, then tool calls, each its own content block.
    ``text`` as a tuple is sent as exactly those deltas; tool input streams in
    ``fragment``-character pieces. Usage: ``input_tokens`` (default: the words sent),
    the cache's, and one output token per delta."""

    text: str | tuple[str, ...] = ""
    tool_calls: tuple[ToolUse, ...] = ()
    thinking: str = ""
    stop_reason: str | None = None  # default: tool_use with calls, else end_turn
    fragment: int = 5
    first_delay: float = 0.0  # seconds before the first event
    chunk_delay: float = 0.0  # seconds before each later event
    input_tokens: int | None = None
    cache_read: int = 0
    cache_write: int = 0


@dataclass(frozen=True)
class Fault:
    """A scripted failure: an HTTP error answer with the API's error body, or an
    ``error`` event after ``after`` content deltas of ``reply`` (a 200 gone bad)."""

    status: int = 500
    error_type: str = ""
    message: str = ""
    after: int | None = None  # None: an HTTP error, no stream
    reply: Reply | None = None

    @classmethod
    def http(cls, status: int, message: str = "", error_type: str = "") -> Fault:
        return cls(status, error_type or ERROR_TYPES.get(status, "api_error"), message)

    @classmethod
    def midstream(cls, error_type: str = "overloaded_error", after: int = 1,
                  reply: Reply | None = None) -> Fault:  # fmt: skip
        return cls(200, error_type, "", after, reply)

    def body(self) -> dict[str, Any]:
        message = self.message or MESSAGES.get(self.error_type, f"stub {self.error_type}")
        return {"type": "error", "error": {"type": self.error_type, "message": message}}


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: Any
    completed: bool = False  # the whole answer went out
    disconnected: bool = False  # the client left before it had


def error(status: int, message: str = "", error_type: str = "") -> JSONResponse:
    return JSONResponse(Fault.http(status, message, error_type).body(), status_code=status)


def _keys(request: Request) -> tuple[str | None, str]:
    """The key as the API documents it (``x-api-key``), and as the SDK (2.x) sends it."""
    bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
    return request.headers.get("x-api-key"), bearer


def _pieces(text: str | tuple[str, ...]) -> list[str]:
    """Word-sized pieces that join back to ``text``, or the given ones."""
    return list(text) if isinstance(text, tuple) else re.findall(r"\s*\S+\s*", text)


def _sse(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def _content(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else content or []


def shape_error(body: Any) -> str | None:
    """What the API would refuse in this request (its 400's message), or None."""
    if not isinstance(body, dict) or not body.get("model"):
        return "model: Field required"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    messages = body.get("messages") or []
    if not messages or messages[0].get("role") != "user":
        return "messages: the first message must use the user role"
    called: list[str] = []  # the tool_use ids of the message before
    for i, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        if i and message.get("role") == messages[i - 1].get("role"):
            return f"messages.{i}: roles must alternate between user and assistant"
        blocks = _content(message)
        results = [str(b.get("tool_use_id")) for b in blocks if b.get("type") == "tool_result"]
        if (called or results) and sorted(results) != sorted(called):
            return f"messages.{i}: each tool_use needs its tool_result right after, and only it"
        if results and blocks[0].get("type") != "tool_result":
            return f"messages.{i}: tool_result blocks must come first"
        if any(b.get("type") == "text" and not b.get("text") for b in blocks):
            return f"messages.{i}: text content blocks must be non-empty"
        called = [b["id"] for b in blocks if b.get("type") == "tool_use"]
    if called:
        return "the last message has tool_use blocks without tool_result blocks after them"
    return _tools_error(body, messages)


def _tools_error(body: dict[str, Any], messages: list[dict[str, Any]]) -> str | None:
    used = any(b.get("type") == "tool_use" for m in messages for b in _content(m))
    if used and not body.get("tools"):
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    thinking = body.get("thinking") or {}
    if thinking.get("type") != "enabled":
        return None
    if thinking.get("budget_tokens", 0) >= body["max_tokens"]:
        return "`max_tokens` must be greater than `thinking.budget_tokens`"
    if (body.get("tool_choice") or {}).get("type") in ("any", "tool"):
        return "Thinking may not be enabled when tool_choice forces tool use."
    last = messages[-2]["content"] if len(messages) > 1 else []
    if any(b.get("type") == "tool_use" for b in last) and last[0].get("type") != "thinking":
        return "Expected `thinking` or `redacted_thinking`, but found `tool_use`."
    return None


class AnthropicStub:
    """The fake server; a context manager. Scripts and records are thread-safe (the
    server runs in a thread of its own)."""

    def __init__(self, api_key: str | None = "sk-ant-stub") -> None:
        self.api_key = api_key or "any-key"
        self._key = api_key  # None accepts any key
        self.default_text = "Hello there! How can I help you today?"
        self._lock = threading.Lock()
        self._script: deque[Reply | Fault] = deque()
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._serving = ExitStack()
        self.url = ""

    def __enter__(self) -> AnthropicStub:
        self.url = self._serving.enter_context(serve_in_thread(self._app(), "the Anthropic stub"))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()  # ends delays at once, so the server can stop
        self._serving.close()

    def script(self, *items: Reply | Fault | str) -> None:
        """Queue answers: a string is a text reply."""
        with self._lock:
            self._script.extend(Reply(i) if isinstance(i, str) else i for i in items)

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self._requests.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    async def wait_for(self, predicate: Any, within: float = 5.0) -> bool:
        """Poll ``predicate`` (state the server thread sets) for up to ``within`` s."""
        for _ in range(int(within / 0.01)):
            if predicate():
                return True
            await asyncio.sleep(0.01)
        return bool(predicate())

    # -- the endpoint ----------------------------------------------------------------

    def _app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/messages", self._messages, methods=["POST"])])

    async def _messages(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        record = RecordedRequest(request.url.path, dict(request.headers), body)
        with self._lock:
            self._requests.append(record)
        if self._key is not None and self._key not in _keys(request):
            return error(401)
        if not request.headers.get("anthropic-version"):
            return error(400, "anthropic-version: header is required")
        if (problem := shape_error(body)) is not None:
            return error(400, problem)
        with self._lock:
            item = self._script.popleft() if self._script else None
        fault = item if isinstance(item, Fault) else None
        if fault is not None and fault.after is None:
            record.completed = True
            return JSONResponse(fault.body(), status_code=fault.status)
        reply = item if isinstance(item, Reply) else fault.reply if fault else None
        reply = reply or Reply(self.default_text)
        if not body.get("stream"):
            record.completed = True
            return JSONResponse(self._message(body, reply))
        events = self._stream(body, reply, fault)
        return StreamingResponse(self._send(events, reply, record), media_type="text/event-stream")

    # -- answers -----------------------------------------------------------------------

    def _blocks(self, reply: Reply) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        """Each content block: its start form and its deltas."""
        out: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        if reply.thinking:
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": t} for t in _pieces(reply.thinking)]
            out.append((start, [*deltas, {"type": "signature_delta", "signature": "sig-stub"}]))
        if reply.text:
            deltas = [{"type": "text_delta", "text": t} for t in _pieces(reply.text)]
            out.append(({"type": "text", "text": ""}, deltas))
        for n, call in enumerate(reply.tool_calls):
            start = {"type": "tool_use", "id": call.id or f"toolu_stub_{n}", "name": call.name}
            args = call.input if isinstance(call.input, str) else json.dumps(call.input)
            size = max(reply.fragment, 1)
            # The API's first fragment is empty, as here.
            parts = [""] + [args[i : i + size] for i in range(0, len(args), size)]
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in parts]
            out.append(({**start, "input": {}}, deltas))
        return out

    def _usage(self, body: dict[str, Any], reply: Reply, output: int) -> dict[str, Any]:
        sent = json.dumps([body.get("system"), body.get("messages")])
        return {
            "input_tokens": len(sent.split()) if reply.input_tokens is None else reply.input_tokens,
            "cache_read_input_tokens": reply.cache_read,
            "cache_creation_input_tokens": reply.cache_write,
            "output_tokens": output,
        }

    def _head(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
        model = body.get("model", "claude-stub")
        return {"id": "msg_stub", "type": "message", "role": "assistant", "model": model,
                "stop_reason": stop, "stop_sequence": None}  # fmt: skip

    def _message(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        content = []
        for start, deltas in self._blocks(reply):
            if start["type"] == "thinking":
                thought = "".join(d.get("thinking", "") for d in deltas)
                content.append({**start, "thinking": thought, "signature": "sig-stub"})
            elif start["type"] == "text":
                content.append({**start, "text": "".join(d["text"] for d in deltas)})
            else:
                raw = "".join(d["partial_json"] for d in deltas)
                content.append({**start, "input": json.loads(raw) if raw else {}})
        output = sum(len(d) for _, d in self._blocks(reply))
        usage = self._usage(body, reply, output)
        return {**self._head(body, reply), "content": content, "usage": usage}

    def _stream(
        self, body: dict[str, Any], reply: Reply, fault: Fault | None
    ) -> list[tuple[bool, dict[str, Any]]]:
        """``(is_content, event)`` in order; a mid-stream fault replaces the rest."""
        head = self._head(body, reply)
        stop = head.pop("stop_reason")
        start = {**head, "content": [], "stop_reason": None, "usage": self._usage(body, reply, 1)}
        out: list[tuple[bool, dict[str, Any]]] = [
            (False, {"type": "message_start", "message": start}),
            (False, {"type": "ping"}),
        ]
        for index, (block, deltas) in enumerate(self._blocks(reply)):
            out.append((False, {"type": "content_block_start", "index": index,
                                "content_block": block}))  # fmt: skip
            for delta in deltas:
                out.append((True, {"type": "content_block_delta", "index": index, "delta": delta}))
            out.append((False, {"type": "content_block_stop", "index": index}))
        output = sum(1 for content, _ in out if content)
        delta = {"stop_reason": stop, "stop_sequence": None}
        out.append((False, {"type": "message_delta", "delta": delta,
                            "usage": {"output_tokens": output}}))  # fmt: skip
        out.append((False, {"type": "message_stop"}))
        if fault is not None and fault.after is not None:
            sent = [i for i, (content, _) in enumerate(out) if content][: fault.after]
            cut = sent[-1] + 1 if sent else 2
            out = [*out[:cut], (False, fault.body())]
        return out

    async def _send(
        self, events: list[tuple[bool, dict[str, Any]]], reply: Reply, record: RecordedRequest
    ) -> AsyncIterator[bytes]:
        try:
            for n, (_, event) in enumerate(events):
                if not await self._pause(reply.first_delay if n == 0 else reply.chunk_delay):
                    return
                yield _sse(event)
            record.completed = True
        finally:
            # Starlette cancels this body when the client disconnects.
            record.disconnected = not record.completed

    async def _pause(self, seconds: float) -> bool:
        """Sleep (a disconnect cancels it); False if the stub is stopping."""
        end = asyncio.get_running_loop().time() + seconds
        while (left := end - asyncio.get_running_loop().time()) > 0:
            if self._stopping.is_set():
                return False
            await asyncio.sleep(min(left, 0.05))
        return True


@pytest.fixture(name="anthropic_stub")
def anthropic_stub_fixture() -> Iterator[AnthropicStub]:
    """A fake Anthropic API for one test."""
    with AnthropicStub() as stub:
        yield stub
