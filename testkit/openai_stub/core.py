"""The stub's shared machinery: scripts per endpoint, request records, sleeps that
notice a departed client, and stream faults. The endpoints build on it."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from email import policy
from email.parser import BytesParser
from typing import Any, cast

from fastapi import Request

from testkit.openai_stub.faults import Aborted, Fault, Truncated, error_response
from testkit.openai_stub.script import RecordedRequest, StubConfig


def parse_multipart(content_type: str, body: bytes) -> dict[str, Any]:
    """Multipart form fields (stdlib ``email``: the stub needs no python-multipart)."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = BytesParser(policy=policy.HTTP).parsebytes(head + body)
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        # cast: a form field is a leaf part, whose decoded payload is bytes.
        payload = cast(bytes, part.get_payload(decode=True))
        filename = part.get_filename()
        fields[str(name)] = payload if filename else payload.decode()
        if filename:
            fields[f"{name}.filename"] = filename
    return fields


class StubCore:
    """Config, scripts and records; what every endpoint of the stub uses."""

    def __init__(self, config: StubConfig | None = None) -> None:
        self.config = config or StubConfig()
        self._lock = threading.Lock()
        self._queues: dict[str, deque[Any]] = {k: deque() for k in ("chat", "stt", "tts", "models")}
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()

    def _push(self, endpoint: str, items: list[Any]) -> None:
        with self._lock:
            self._queues[endpoint].extend(items)

    def _pop(self, endpoint: str) -> Any:
        with self._lock:
            queue = self._queues[endpoint]
            return queue.popleft() if queue else None

    async def _record(self, request: Request) -> RecordedRequest:
        raw = await request.body()
        content_type = request.headers.get("content-type", "")
        body: Any = None
        if content_type.startswith("multipart/"):
            body = parse_multipart(content_type, raw)
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
            return record, None, error_response(401)
        item = self._pop(endpoint)
        if isinstance(item, Fault) and item.kind == "status":
            record.completed = True
            return record, item, error_response(item.status, item.message)
        if isinstance(item, Fault) and item.kind == "hang":
            await self._sleep(self.config.max_hang, request, record)
            return record, item, error_response(504)
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

    async def _strike(self, fault: Fault) -> AsyncIterator[bytes]:
        """Apply a stream fault: bytes to send, a pause, or the end of the body."""
        if fault.kind == "cut":
            raise Aborted("stub: connection cut on purpose")
        if fault.kind == "truncate":
            raise Truncated
        if fault.kind == "malformed":
            yield b'data: {"choices": [{"delta": not json\n\n'
        if fault.kind == "stall":
            await self._pause(fault.seconds)

    async def _pause(self, seconds: float) -> None:
        """Sleep in a streamed body (a client disconnect cancels it), bounded by max_hang."""
        end = time.monotonic() + min(seconds, self.config.max_hang)
        while (left := end - time.monotonic()) > 0 and not self._stopping.is_set():
            await asyncio.sleep(min(left, 0.05))
