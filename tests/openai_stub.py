"""An OpenAI-compatible stub server on 127.0.0.1, for tests and benchmarks.

Real HTTP (FastAPI run by uvicorn in a background thread, on a free port), so the real
``openai`` client is exercised end to end. Endpoints: ``POST /v1/chat/completions``
(JSON or SSE), ``POST /v1/audio/transcriptions`` (multipart), ``POST /v1/audio/speech``
(streamed 24 kHz s16le PCM: a tone whose length scales with the text) and
``GET /v1/models``.

    with OpenAIStub() as stub:                       # or the ``openai_stub`` fixture
        stub.config.first_token_delay = 0.05         # delays: see StubConfig
        stub.script_chat("Hi there.", ChatReply(tool_calls=(ToolCall("f", {"a": 1}),)))
        stub.script_chat(Fault.http(500), Fault.hang(), Fault.cut(after=2))
        stub.fail_times("stt", 2, Fault.http(503))  # then the default transcript
        ... OpenAILLM("m", base_url=stub.base_url, api_key=stub.api_key) ...
        stub.requests("/v1/chat/completions")[-1].body["tools"]

In tests, ``from tests.openai_stub import openai_stub_fixture  # noqa: F401`` provides the
``openai_stub`` fixture (one server per session, reset for each test).

Each endpoint takes its scripted items in order and falls back to the default reply
when its queue is empty. Every request is recorded (headers, parsed body, whether the
client went away before the response ended). Hangs and stalls end when the client
disconnects, after ``max_hang`` seconds, or when the stub stops.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import math
import re
import socket
import threading
import time
import wave
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from email import policy
from email.parser import BytesParser
from typing import Any, Literal

import numpy as np
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

TTS_RATE = 24000
Endpoint = Literal["chat", "stt", "tts"]
FaultKind = Literal["status", "hang", "cut", "truncate", "malformed", "stall"]


@dataclass(frozen=True)
class ToolCall:
    """A scripted tool call; ``arguments`` as a string is sent verbatim (bad JSON too)."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str = ""  # default: call_<index>


@dataclass(frozen=True)
class ChatReply:
    """A scripted chat answer: text, then tool calls (their fragments interleaved)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class Fault:
    """A scripted failure, by ``kind``:

    - ``http(status)``: answer ``status`` with an OpenAI-style error body;
    - ``hang()``: never answer, until the client gives up;
    - ``cut(after)``: drop the connection mid-body (no finish_reason, no [DONE]);
    - ``truncate(after)``: end the body cleanly mid-stream (no finish_reason, no [DONE]);
    - ``malformed(after)``: send a data line that is not JSON, then go on;
    - ``stall(seconds, after)``: pause the body for ``seconds``, then go on.

    Body faults strike after ``after`` content chunks (audio chunks for TTS).
    """

    kind: FaultKind
    status: int = 500
    after: int = 0
    seconds: float = 0.0

    @classmethod
    def http(cls, status: int) -> Fault:
        return cls("status", status=status)

    @classmethod
    def hang(cls) -> Fault:
        return cls("hang")

    @classmethod
    def cut(cls, after: int = 1) -> Fault:
        return cls("cut", after=after)

    @classmethod
    def truncate(cls, after: int = 1) -> Fault:
        return cls("truncate", after=after)

    @classmethod
    def malformed(cls, after: int = 1) -> Fault:
        return cls("malformed", after=after)

    @classmethod
    def stall(cls, seconds: float, after: int = 1) -> Fault:
        return cls("stall", after=after, seconds=seconds)


@dataclass
class StubConfig:
    """Delays (seconds) and defaults; change fields at any time, per test."""

    first_token_delay: float = 0.0
    token_delay: float = 0.0
    stt_delay: float = 0.0
    tts_first_audio_delay: float = 0.0
    tts_chunk_delay: float = 0.0
    tts_chunk_bytes: int = 4801  # odd on purpose: samples straddle chunk boundaries
    tts_seconds_per_char: float = 0.01
    tts_min_seconds: float = 0.1
    default_text: str = "Hello there! How can I help you today?"
    transcript: str = "hello world"
    api_key: str | None = "sk-stub"  # None accepts any key
    max_hang: float = 30.0


@dataclass
class RecordedRequest:
    """What the client sent. ``body``: the JSON, or multipart fields (files as bytes)."""

    path: str
    headers: dict[str, str]
    body: Any
    completed: bool = False  # the whole response went out
    disconnected: bool = False  # the client left before the response ended


_MESSAGES = {
    401: ("Incorrect API key provided.", "invalid_api_key"),
    403: ("You do not have access to this model.", None),
    429: ("Rate limit reached for requests.", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request.", None),
    503: ("The engine is currently overloaded, please try again later.", None),
}


def _error(status: int) -> Response:
    message, code = _MESSAGES.get(status, (f"Stub error {status}.", None))
    body = {"error": {"message": message, "type": "stub_error", "code": code}}
    return JSONResponse(body, status_code=status)


def _parse_multipart(content_type: str, body: bytes) -> dict[str, Any]:
    """Multipart form fields (stdlib ``email``: the stub needs no python-multipart)."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = BytesParser(policy=policy.HTTP).parsebytes(head + body)
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        filename = part.get_filename()
        fields[str(name)] = payload if filename else payload.decode()
        if filename:
            fields[f"{name}.filename"] = filename
    return fields


def wav_info(data: bytes) -> tuple[int, int, int, int]:
    """``(channels, sample width, rate, frames)`` of a WAV file's bytes."""
    with wave.open(io.BytesIO(data), "rb") as wav:
        return wav.getnchannels(), wav.getsampwidth(), wav.getframerate(), wav.getnframes()


def _tokens(text: str) -> list[str]:
    """Word-sized pieces that join back to ``text``."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


def _fragments(arguments: str, size: int = 7) -> list[str]:
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]


class _Aborted(Exception):
    """Raised inside a streamed body to make uvicorn drop the connection."""


class _Truncated(Exception):
    """Ends a streamed body cleanly, before its natural end."""


def _not_deliberate(record: logging.LogRecord) -> bool:
    """Keeps uvicorn from logging a traceback for each scripted connection cut."""
    return not (record.exc_info and isinstance(record.exc_info[1], _Aborted))


class OpenAIStub:
    """The stub server; a context manager (``start``/``stop``) with a script per endpoint."""

    def __init__(self, config: StubConfig | None = None) -> None:
        self.config = config or StubConfig()
        self._lock = threading.Lock()
        self._queues: dict[str, deque[Any]] = {k: deque() for k in ("chat", "stt", "tts", "models")}
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.url = ""

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def api_key(self) -> str:
        return self.config.api_key or "any-key"

    def start(self, timeout: float = 10.0) -> OpenAIStub:
        server_log = logging.getLogger("uvicorn.error")
        if _not_deliberate not in server_log.filters:
            server_log.addFilter(_not_deliberate)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self._socket = sock
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            self._app(),
            log_config=None,  # leave the host process's logging alone
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True, name="openai-stub"
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.stop()
                raise RuntimeError("the OpenAI stub did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(5)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting and records ---------------------------------------------------------------

    def reset(self) -> None:
        """Default config, empty scripts, no records."""
        with self._lock:
            self.config = StubConfig()
            for queue in self._queues.values():
                queue.clear()
            self._requests.clear()

    def script_chat(self, *items: ChatReply | Fault | str) -> None:
        """Queue chat answers: a string is a text reply."""
        self._push("chat", [ChatReply(i) if isinstance(i, str) else i for i in items])

    def script_stt(self, *items: str | Fault) -> None:
        """Queue transcripts or faults."""
        self._push("stt", list(items))

    def script_tts(self, *items: Fault | None) -> None:
        """Queue TTS faults; ``None`` is a normal answer."""
        self._push("tts", list(items))

    def fail_times(self, endpoint: Endpoint, n: int, fault: Fault) -> None:
        """The next ``n`` requests to ``endpoint`` fail with ``fault``, then it recovers."""
        self._push(endpoint, [fault] * n)

    def _push(self, endpoint: str, items: list[Any]) -> None:
        with self._lock:
            self._queues[endpoint].extend(items)

    def _pop(self, endpoint: str) -> Any:
        with self._lock:
            queue = self._queues[endpoint]
            return queue.popleft() if queue else None

    def requests(self, path: str | None = None) -> list[RecordedRequest]:
        """Requests received so far (to ``path``, if given), oldest first."""
        with self._lock:
            return [r for r in self._requests if path is None or r.path == path]

    async def wait_for(self, predicate: Callable[[], bool], within: float = 2.0) -> bool:
        """Poll ``predicate`` (for state the server thread sets) for up to ``within`` s."""
        deadline = time.monotonic() + within
        while not predicate():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def tts_samples(self, text: str) -> int:
        """How many samples the speech endpoint returns for ``text``."""
        seconds = max(self.config.tts_min_seconds, len(text) * self.config.tts_seconds_per_char)
        return round(seconds * TTS_RATE)

    # -- the app -----------------------------------------------------------------------------

    def _app(self) -> FastAPI:
        app = FastAPI()
        app.post("/v1/chat/completions")(self._chat)
        app.post("/v1/audio/transcriptions")(self._transcriptions)
        app.post("/v1/audio/speech")(self._speech)
        app.get("/v1/models")(self._models)
        return app

    async def _record(self, request: Request) -> RecordedRequest:
        raw = await request.body()
        content_type = request.headers.get("content-type", "")
        body: Any = None
        if content_type.startswith("multipart/"):
            body = _parse_multipart(content_type, raw)
        elif raw:
            body = json.loads(raw)
        record = RecordedRequest(request.url.path, dict(request.headers), body)
        with self._lock:
            self._requests.append(record)
        return record

    async def _begin(self, request: Request, endpoint: str) -> tuple[RecordedRequest, Any, Any]:
        """Record the request, then ``(record, scripted item, early response or None)``:
        the early response is a 401 for a wrong key, or a scripted status or hang."""
        record = await self._record(request)
        key = self.config.api_key
        if key is not None and request.headers.get("authorization") != f"Bearer {key}":
            return record, None, _error(401)
        item = self._pop(endpoint)
        if isinstance(item, Fault) and item.kind == "status":
            record.completed = True
            return record, item, _error(item.status)
        if isinstance(item, Fault) and item.kind == "hang":
            await self._sleep(self.config.max_hang, request, record)
            return record, item, _error(504)
        return record, item, None

    async def _sleep(self, seconds: float, request: Request, record: RecordedRequest) -> bool:
        """Sleep, watching for the client leaving; False if it left (or the stub stops)."""
        deadline = time.monotonic() + min(seconds, self.config.max_hang)
        while time.monotonic() < deadline:
            if self._stopping.is_set() or await request.is_disconnected():
                record.disconnected = True
                return False
            await asyncio.sleep(min(0.01, max(deadline - time.monotonic(), 0)))
        return True

    async def _models(self, request: Request) -> Response:
        if (early := (await self._begin(request, "models"))[2]) is not None:
            return early
        names = ("stub-llm", "stub-stt", "stub-tts")
        data = [{"id": n, "object": "model", "created": 0, "owned_by": "stub"} for n in names]
        return JSONResponse({"object": "list", "data": data})

    # -- chat --------------------------------------------------------------------------------

    async def _chat(self, request: Request) -> Response:
        record, item, early = await self._begin(request, "chat")
        if early is not None:
            return early
        fault = item if isinstance(item, Fault) else None
        reply = item if isinstance(item, ChatReply) else ChatReply(self.config.default_text)
        body = record.body
        if not body.get("stream"):
            record.completed = True
            return JSONResponse(self._completion(body, reply))
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events = self._chunks(body, reply, usage)
        return StreamingResponse(self._sse(events, fault, record), media_type="text/event-stream")

    def _usage(self, body: dict[str, Any], completion_tokens: int) -> dict[str, int]:
        prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        }

    def _completion(self, body: dict[str, Any], reply: ChatReply) -> dict[str, Any]:
        calls = [
            {"id": c.id or f"call_{i}", "type": "function", "function": _function(c)}
            for i, c in enumerate(reply.tool_calls)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub-llm"),
            "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
            "usage": self._usage(body, len(_tokens(reply.text)) + len(calls)),
        }

    def _chunks(
        self, body: dict[str, Any], reply: ChatReply, usage: bool
    ) -> list[tuple[bool, dict[str, Any]]]:
        """``(is_content, chunk)`` in order: role, text, tool calls, finish, usage."""
        model = body.get("model", "stub-llm")

        def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
            choices = (
                [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
            )
            return {
                "id": "chatcmpl-stub",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": choices,
            }

        out = [(False, chunk({"role": "assistant", "content": ""}))]
        out += [(True, chunk({"content": t})) for t in _tokens(reply.text)]
        calls = reply.tool_calls
        for i, call in enumerate(calls):
            head = {"index": i, "id": call.id or f"call_{i}", "type": "function"}
            head["function"] = {"name": call.name, "arguments": ""}
            out.append((True, chunk({"tool_calls": [head]})))
        # Argument fragments round-robin across the calls, as parallel calls may arrive.
        pieces = [_fragments(_function(c)["arguments"]) for c in calls]
        for j in range(max((len(p) for p in pieces), default=0)):
            for i, frags in enumerate(pieces):
                if j < len(frags):
                    delta = {"tool_calls": [{"index": i, "function": {"arguments": frags[j]}}]}
                    out.append((True, chunk(delta)))
        out.append((False, chunk({}, _finish(reply))))
        if usage:
            final = chunk(None)
            final["usage"] = self._usage(body, sum(1 for c, _ in out if c))
            out.append((False, final))
        return out

    async def _sse(
        self,
        events: list[tuple[bool, dict[str, Any]]],
        fault: Fault | None,
        record: RecordedRequest,
    ) -> AsyncIterator[bytes]:
        sent = 0  # content chunks so far
        on_purpose = False  # the body ends early because the script says so
        try:
            for index, (is_content, event) in enumerate(events):
                # A fault strikes after ``after`` content chunks, or before the finish
                # chunk when there are fewer; never before the role chunk.
                if fault is not None and index > 0 and sent >= fault.after:
                    on_purpose = fault.kind in ("cut", "truncate")
                    async for data in self._strike(fault):
                        yield data
                    fault = None
                if is_content:
                    delay = self.config.first_token_delay if sent == 0 else self.config.token_delay
                    await self._pause(delay)
                    sent += 1
                yield f"data: {json.dumps(event)}\n\n".encode()
            yield b"data: [DONE]\n\n"
            record.completed = True
        except _Truncated:
            return
        finally:
            record.disconnected = not record.completed and not on_purpose

    async def _strike(self, fault: Fault) -> AsyncIterator[bytes]:
        """Apply a stream fault: bytes to send, a pause, or the end of the body."""
        if fault.kind == "cut":
            raise _Aborted("stub: connection cut on purpose")
        if fault.kind == "truncate":
            raise _Truncated
        if fault.kind == "malformed":
            yield b'data: {"choices": [{"delta": not json\n\n'
        if fault.kind == "stall":
            await self._pause(fault.seconds)

    async def _pause(self, seconds: float) -> None:
        """Sleep in a streamed body (a client disconnect cancels it), bounded by max_hang."""
        end = time.monotonic() + min(seconds, self.config.max_hang)
        while (left := end - time.monotonic()) > 0 and not self._stopping.is_set():
            await asyncio.sleep(min(left, 0.05))

    # -- audio -------------------------------------------------------------------------------

    async def _transcriptions(self, request: Request) -> Response:
        record, item, early = await self._begin(request, "stt")
        if early is not None:
            return early
        if self.config.stt_delay and not await self._sleep(self.config.stt_delay, request, record):
            return _error(504)
        record.completed = True
        return JSONResponse({"text": item if isinstance(item, str) else self.config.transcript})

    async def _speech(self, request: Request) -> Response:
        record, item, early = await self._begin(request, "tts")
        if early is not None:
            return early
        delay = self.config.tts_first_audio_delay
        if delay and not await self._sleep(delay, request, record):
            return _error(504)
        pcm = self._tone(record.body.get("input", "")).tobytes()
        fault = item if isinstance(item, Fault) else None
        return StreamingResponse(
            self._audio(pcm, fault, record), media_type="application/octet-stream"
        )

    def _tone(self, text: str) -> np.ndarray:
        n = self.tts_samples(text)
        t = np.arange(n) / TTS_RATE
        return (0.3 * 32767 * np.sin(2 * math.pi * 440 * t)).astype("<i2")

    async def _audio(
        self, pcm: bytes, fault: Fault | None, record: RecordedRequest
    ) -> AsyncIterator[bytes]:
        size = self.config.tts_chunk_bytes
        on_purpose = False
        try:
            for n, start in enumerate(range(0, len(pcm), size)):
                if fault is not None and n >= fault.after:
                    on_purpose = fault.kind in ("cut", "truncate")
                    async for data in self._strike(fault):
                        yield data
                    fault = None
                await self._pause(self.config.tts_chunk_delay if n else 0.0)
                yield pcm[start : start + size]
            record.completed = True
        except _Truncated:
            return
        finally:
            record.disconnected = not record.completed and not on_purpose


def _function(call: ToolCall) -> dict[str, str]:
    args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
    return {"name": call.name, "arguments": args}


def _finish(reply: ChatReply) -> str:
    return "tool_calls" if reply.tool_calls else "stop"


# -- pytest ----------------------------------------------------------------------------------

_SHARED = pytest.StashKey[OpenAIStub]()


@pytest.fixture(name="openai_stub")
def openai_stub_fixture(request: pytest.FixtureRequest) -> Iterator[OpenAIStub]:
    """The stub with a fresh script and config. One server serves the whole session
    (started on first use, stopped at session end), so tests only import this name."""
    config = request.config
    stub = config.stash.get(_SHARED, None)
    if stub is None:
        stub = OpenAIStub().start()
        config.stash[_SHARED] = stub
        config.add_cleanup(stub.stop)
    stub.reset()
    yield stub
    stub.reset()
