"""A fake of the Gemini API on 127.0.0.1, for tests: real HTTP, so Google's own SDK is
exercised end to end (what it accepts is what proves the fake faithful).

Endpoints, under any API version (the SDK's default is ``v1``; ``v1beta`` too):
``POST /{version}/models/{model}:streamGenerateContent?alt=sse`` answers Server-Sent
Events, one ``data: {GenerateContentResponse}`` per chunk (camelCase, as the REST API
sends: ``candidates[0].content.parts``, ``finishReason`` on the last chunk, running
``usageMetadata`` on each); ``:generateContent`` answers the whole response as JSON.
The key goes in the ``x-goog-api-key`` header or the ``key`` query parameter; a wrong
one gets Google's 400 ``API_KEY_INVALID``.

    with GeminiStub() as stub:
        stub.script("Hi there.", GeminiReply(calls=(FunctionCall("f", {"a": 1}),)))
        stub.script(GeminiFault.http(503), GeminiFault.cut(after=2))
        stub.config.first_chunk_delay = 5.0             # delays: see GeminiConfig
        ... GoogleLLM("gemini-2.5-flash", api_key=stub.api_key, base_url=stub.url) ...
        stub.requests()[-1].body["contents"]
        proto_field(declaration, "parametersJsonSchema")  # camelCase or snake_case

Scripted items are answered in order; with none left, ``config.default_text``. Every
request is recorded (path, model, query, headers, JSON body, whether the client went
away before the answer ended). Delays end when the client disconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from testkit.thread_server import serve_in_thread

# Google's status names and usual messages, by HTTP status.
_ERRORS = {
    400: ("INVALID_ARGUMENT", "Request contains an invalid argument."),
    401: ("UNAUTHENTICATED", "Request had invalid authentication credentials."),
    403: ("PERMISSION_DENIED", "The caller does not have permission."),
    404: ("NOT_FOUND", "Requested entity was not found."),
    429: ("RESOURCE_EXHAUSTED", "You exceeded your current quota."),
    500: ("INTERNAL", "An internal error has occurred. Please retry."),
    503: ("UNAVAILABLE", "The model is overloaded. Please try again later."),
    504: ("DEADLINE_EXCEEDED", "The request timed out. Please try again."),
}
BAD_KEY_MESSAGE = "API key not valid. Please pass a valid API key."


@dataclass(frozen=True)
class FunctionCall:
    """A scripted function call; ``signature`` is a base64 ``thoughtSignature``."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    id: str = ""  # Gemini's API mostly sends none
    signature: str = ""


@dataclass(frozen=True)
class GeminiReply:
    """A scripted answer: ``thought`` (thought parts), then ``text`` (word-sized chunks),
    then ``calls`` (all in one chunk, as Gemini sends parallel calls)."""

    text: str = ""
    calls: tuple[FunctionCall, ...] = ()
    thought: str = ""
    finish_reason: str = "STOP"


@dataclass(frozen=True)
class GeminiFault:
    """A scripted failure: ``http(status)`` answers it with Google's error JSON;
    ``cut(after)`` drops the connection after ``after`` chunks (no finish reason)."""

    kind: Literal["status", "cut"]
    status: int = 500
    message: str | None = None
    reason: str | None = None  # an ErrorInfo reason in the details ("API_KEY_INVALID")
    after: int = 0

    @classmethod
    def http(
        cls, status: int, message: str | None = None, reason: str | None = None
    ) -> GeminiFault:
        return cls("status", status=status, message=message, reason=reason)

    @classmethod
    def cut(cls, after: int = 1) -> GeminiFault:
        return cls("cut", after=after)


@dataclass
class GeminiConfig:
    """Delays (seconds) and defaults; change fields at any time, per test."""

    api_key: str | None = "gemini-stub-key"  # None accepts any key
    first_chunk_delay: float = 0.0  # after the headers, before the first chunk
    chunk_delay: float = 0.0  # before each later chunk
    default_text: str = "Hello from Gemini."
    max_hang: float = 30.0  # no delay lasts longer


@dataclass
class RecordedRequest:
    """What the client sent; ``body`` is the parsed JSON."""

    path: str
    version: str
    model: str
    method: str  # "streamGenerateContent" or "generateContent"
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    completed: bool = False  # the whole answer went out
    disconnected: bool = False  # the client left before the answer ended


def error_body(status: int, message: str | None = None, reason: str | None = None) -> JSONResponse:
    """Google's error JSON for ``status`` (with an ErrorInfo when ``reason`` is given)."""
    name, usual = _ERRORS.get(status, ("UNKNOWN", f"Stub error {status}."))
    error: dict[str, Any] = {"code": status, "message": message or usual, "status": name}
    if reason:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                             "reason": reason, "domain": "googleapis.com"}]  # fmt: skip
    return JSONResponse({"error": error}, status_code=status)


def proto_field(message: dict[str, Any], name: str, default: Any = None) -> Any:
    """A field of a recorded body as Google's parser reads it: by its lowerCamelCase
    ``name`` or its snake_case one (the SDK sends some nested fields snake_case)."""
    snake = re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()
    return message.get(name, message.get(snake, default))


def _words(text: str) -> list[str]:
    """Word-sized pieces that join back to ``text``."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


def _call_part(call: FunctionCall) -> dict[str, Any]:
    function: dict[str, Any] = {"name": call.name, "args": call.args}
    if call.id:
        function["id"] = call.id
    part: dict[str, Any] = {"functionCall": function}
    if call.signature:
        part["thoughtSignature"] = call.signature
    return part


def _parts(reply: GeminiReply) -> list[list[dict[str, Any]]]:
    """The parts of each chunk, in order; at least one chunk."""
    chunks = [[{"text": t, "thought": True}] for t in _words(reply.thought)]
    chunks += [[{"text": t}] for t in _words(reply.text)]
    if reply.calls:
        chunks.append([_call_part(c) for c in reply.calls])
    return chunks or [[{"text": ""}]]


def _prompt_tokens(body: dict[str, Any]) -> int:
    texts = [p.get("text", "") for c in body.get("contents", []) for p in c.get("parts", [])]
    return max(1, sum(len(t.split()) for t in texts))


class GeminiStub:
    """The fake server, a context manager (``start``/``stop``), with its script."""

    def __init__(self, config: GeminiConfig | None = None) -> None:
        self.config = config or GeminiConfig()
        self._lock = threading.Lock()
        self._queue: deque[GeminiReply | GeminiFault] = deque()
        self._requests: list[RecordedRequest] = []
        self._serving: contextlib.ExitStack | None = None
        self.url = ""  # the base URL: scheme, host and port (the SDK adds the version)

    @property
    def api_key(self) -> str:
        return self.config.api_key or "any-key"

    def start(self) -> GeminiStub:
        app = Starlette(routes=[Route("/{version}/models/{target:path}", self._handle,
                                      methods=["POST"])])  # fmt: skip
        self._serving = contextlib.ExitStack()
        self.url = self._serving.enter_context(serve_in_thread(app, "the Gemini stub"))
        return self

    def stop(self) -> None:
        if self._serving is not None:
            self._serving.close()
        self._serving = None

    def __enter__(self) -> GeminiStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting and records ---------------------------------------------------------------

    def script(self, *items: GeminiReply | GeminiFault | str) -> None:
        """Queue answers: a string is a text reply."""
        with self._lock:
            self._queue.extend(GeminiReply(i) if isinstance(i, str) else i for i in items)

    def reset(self) -> None:
        """Default config, empty script, no records."""
        with self._lock:
            self.config = GeminiConfig()
            self._queue.clear()
            self._requests.clear()

    def requests(self) -> list[RecordedRequest]:
        """Requests received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    async def wait_for(self, predicate: Callable[[], bool], within: float = 2.0) -> bool:
        """Poll ``predicate`` (for state the server thread sets) for up to ``within`` s."""
        deadline = time.monotonic() + within
        while not predicate():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    # -- the endpoints -----------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        model, _, method = request.path_params["target"].rpartition(":")
        raw = await request.body()
        record = RecordedRequest(
            request.url.path, request.path_params["version"], model, method,
            dict(request.query_params), dict(request.headers), json.loads(raw) if raw else None,
        )  # fmt: skip
        with self._lock:
            self._requests.append(record)
            item = self._queue.popleft() if self._queue else None
        if method not in ("streamGenerateContent", "generateContent"):
            return error_body(404, f"Method {method} is not served by the stub.")
        key = request.headers.get("x-goog-api-key") or request.query_params.get("key")
        if self.config.api_key is not None and key != self.config.api_key:
            return error_body(400, BAD_KEY_MESSAGE, "API_KEY_INVALID")
        if isinstance(item, GeminiFault) and item.kind == "status":
            record.completed = True
            return error_body(item.status, item.message, item.reason)
        reply = item if isinstance(item, GeminiReply) else GeminiReply(self.config.default_text)
        fault = item if isinstance(item, GeminiFault) else None
        chunks = self._responses(record, reply)
        if method == "generateContent":
            record.completed = True
            return JSONResponse(self._joined(chunks))
        return StreamingResponse(self._sse(chunks, fault, record), media_type="text/event-stream")

    def _responses(self, record: RecordedRequest, reply: GeminiReply) -> list[dict[str, Any]]:
        """Each chunk's GenerateContentResponse: its parts, a running usage, and the
        finish reason on the last."""
        parts = _parts(reply)
        prompt = _prompt_tokens(record.body or {})
        out: list[dict[str, Any]] = []
        answered = thought = 0
        for index, chunk in enumerate(parts):
            for part in chunk:
                words = len(part.get("text", "").split()) or ("functionCall" in part)
                if part.get("thought"):
                    thought += words
                else:
                    answered += words
            candidate: dict[str, Any] = {"content": {"parts": chunk, "role": "model"}, "index": 0}
            if index == len(parts) - 1:
                candidate["finishReason"] = reply.finish_reason
            usage = {"promptTokenCount": prompt, "candidatesTokenCount": answered,
                     "totalTokenCount": prompt + answered + thought}  # fmt: skip
            if thought:
                usage["thoughtsTokenCount"] = thought
            out.append({"candidates": [candidate], "usageMetadata": usage,
                        "modelVersion": record.model, "responseId": "stub-response"})  # fmt: skip
        return out

    def _joined(self, chunks: list[dict[str, Any]]) -> dict[str, Any]:
        """The non-streamed answer: every chunk's parts in one candidate."""
        whole = dict(chunks[-1])
        candidate = dict(whole["candidates"][0])
        parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
        candidate["content"] = {"parts": parts, "role": "model"}
        whole["candidates"] = [candidate]
        return whole

    async def _sse(
        self, chunks: list[dict[str, Any]], fault: GeminiFault | None, record: RecordedRequest
    ) -> AsyncIterator[bytes]:
        cut = False  # the body ends early because the script says so
        try:
            for index, chunk in enumerate(chunks):
                if fault is not None and index >= fault.after:
                    cut = True
                    raise ConnectionAbortedError("stub: connection cut on purpose")
                delay = self.config.first_chunk_delay if index == 0 else self.config.chunk_delay
                await asyncio.sleep(min(delay, self.config.max_hang))
                yield f"data: {json.dumps(chunk)}\r\n\r\n".encode()
            record.completed = True
        finally:
            # A client that leaves cancels this body (Starlette watches for it).
            record.disconnected = not record.completed and not cut
