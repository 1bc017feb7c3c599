"""A fake of OpenAI's realtime transcription WebSocket (``/v1/realtime?intent=
transcription``) on 127.0.0.1, for tests: a real socket, so the official ``openai``
SDK's own realtime client can drive it too (what proves the fake faithful).

It checks ``Authorization: Bearer <key>`` (401 with OpenAI's JSON error at the
handshake otherwise) and ``intent=transcription`` (400), opens with
``session.created``, answers ``session.update`` with ``session.updated`` (the updates
merged; a session that is not ``transcription`` or a format other than 24 kHz PCM gets
an ``error``), takes ``input_audio_buffer.append`` (base64 pcm16 at 24 kHz), and answers
``input_audio_buffer.commit`` with ``input_audio_buffer.committed`` (``item_id``,
``previous_item_id``), then after ``transcribe_delay`` one
``conversation.item.input_audio_transcription.delta`` per word and a ``...completed``.
A commit of less than ``min_commit_ms`` of audio gets the API's ``error`` with code
``input_audio_buffer_commit_empty`` (and the buffer is kept).

    with OpenAITranscriptionStub() as stub:
        stub.script("first words", "second words")   # one per committed buffer
        stub.transcriber = lambda audio: "..."       # else this, else stub.transcript
        stub.delay_next(0.3, 0.0)                    # per-commit delays (then the default)
        stub.drop_after(24000)                       # 24 kHz bytes; the next connection
        ... OpenAIRealtimeSTT(stub.api_key, base_url=stub.url) ...
        stub.sessions[-1].config["audio"]["input"]; stub.sessions[-1].audio
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from testkit.socket_stub import SocketStub

BYTES_PER_MS = 48  # 24 kHz pcm16 mono
TRANSCRIPTION = "conversation.item.input_audio_transcription"
REFUSED = {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                     "param": None, "code": "invalid_api_key"}}  # fmt: skip
DEFAULT_SESSION: dict[str, Any] = {
    "type": "transcription",
    "id": "sess_stub",
    "object": "realtime.transcription_session",
    "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000},
                        "transcription": {"model": "whisper-1"}, "noise_reduction": None,
                        "turn_detection": {"type": "server_vad", "threshold": 0.5,
                                           "prefix_padding_ms": 300,
                                           "silence_duration_ms": 500}}},
    "include": [],
}  # fmt: skip


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def merged(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update`` over ``base``, objects merged field by field (as ``session.update``
    changes only the fields it names; a ``null`` clears one)."""
    out = dict(base)
    for key, value in update.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            value = merged(old, value)
        out[key] = value
    return out


@dataclass
class Session:
    """One connection, as the stub saw it."""

    query: dict[str, str]
    headers: dict[str, str]
    config: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_SESSION))
    updates: list[dict[str, Any]] = field(default_factory=list)  # each update's session
    audio: int = 0  # bytes of 24 kHz pcm16 appended
    commits: int = 0  # commit requests, rejected ones included
    empty_commits: int = 0
    items: list[int] = field(default_factory=list)  # each committed buffer's bytes
    messages: list[dict[str, Any]] = field(default_factory=list)  # the client's, but appends
    sent: list[dict[str, Any]] = field(default_factory=list)  # the stub's messages
    last_item: str | None = None  # the last committed item's id
    closed: bool = False


class OpenAITranscriptionStub(SocketStub):
    """The fake server (a context manager); it runs its own event loop in a thread."""

    path = "/v1/realtime"
    refused_body = json.dumps(REFUSED) + "\n"

    def __init__(self, api_key: str = "sk-stub-key") -> None:
        super().__init__(api_key)
        self.transcript = "hello world"
        self.transcriber: Callable[[bytes], str] | None = None
        self.transcribe_delay = 0.05  # a guess: no published figure is known to us
        self.min_commit_ms = 100  # the API's "Expected at least 100ms of audio"
        self.sessions: list[Session] = []
        self._script: deque[str] = deque()
        self._delays: deque[float] = deque()
        self._drop: int | None = None
        self._fail = 0

    # -- the test's side --------------------------------------------------------------------

    def script(self, *transcripts: str) -> None:
        """The next committed buffers' words, in order."""
        with self.lock:
            self._script.extend(transcripts)

    def delay_next(self, *seconds: float) -> None:
        """The next committed buffers' transcription delays, in order."""
        with self.lock:
            self._delays.extend(seconds)

    def fail_next(self, count: int = 1) -> None:
        """The next ``count`` transcriptions end in ``...failed`` instead."""
        with self.lock:
            self._fail += count

    def drop_after(self, audio_bytes: int) -> None:
        """The next connection drops (no close frame) once it has this many bytes of
        24 kHz audio."""
        with self.lock:
            self._drop = audio_bytes

    # -- the service's side -----------------------------------------------------------------

    def authorized(self, headers: Headers) -> bool:
        return headers.get("Authorization") == f"Bearer {self.api_key}"

    def _check(self, connection: ServerConnection, request: Request) -> Response | None:
        refused = super()._check(connection, request)
        if refused is not None:
            return refused
        if dict(parse_qsl(urlsplit(request.path).query)).get("intent") != "transcription":
            return connection.respond(400, "this stub serves intent=transcription only\n")
        return None

    async def handle(self, connection: ServerConnection) -> None:
        request = connection.request
        assert request is not None
        query = dict(parse_qsl(urlsplit(request.path).query))
        session = Session(query, {k.lower(): v for k, v in request.headers.raw_items()})
        with self.lock:
            self.sessions.append(session)
            drop, self._drop = self._drop, None
        buffer = bytearray()
        tasks: set[asyncio.Task[None]] = set()
        try:
            await self._send(connection, session, {"type": "session.created",
                                                   "session": session.config})  # fmt: skip
            async for message in connection:
                data = json.loads(message)
                kind = data.get("type")
                if kind != "input_audio_buffer.append":
                    session.messages.append(data)
                if kind == "session.update":
                    await self._update(connection, session, data)
                elif kind == "input_audio_buffer.append":
                    if not await self._append(connection, session, buffer, data, drop):
                        return
                elif kind == "input_audio_buffer.commit":
                    task = await self._commit(connection, session, buffer, data)
                    if task is not None:
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
                else:
                    await self._error(connection, session, data, "invalid_value",
                                      f"Invalid value: '{kind}'.")  # fmt: skip
        except ConnectionClosed:
            pass
        finally:
            session.closed = True
            for task in tasks:
                task.cancel()

    async def _update(self, connection: ServerConnection, session: Session,
                      data: dict[str, Any]) -> None:  # fmt: skip
        update = data.get("session") or {}
        session.updates.append(update)
        if update.get("type") != "transcription":
            await self._error(connection, session, data, "invalid_value",
                              "session.type must be 'transcription' here.")  # fmt: skip
            return
        audio_format = ((update.get("audio") or {}).get("input") or {}).get("format")
        if audio_format is not None and audio_format != {"type": "audio/pcm", "rate": 24000}:
            await self._error(connection, session, data, "invalid_value",
                              "Only 24kHz audio/pcm is supported.")  # fmt: skip
            return
        session.config = merged(session.config, update)
        await self._send(connection, session, {"type": "session.updated",
                                               "session": session.config})  # fmt: skip

    async def _append(self, connection: ServerConnection, session: Session, buffer: bytearray,
                      data: dict[str, Any], drop: int | None) -> bool:  # fmt: skip
        try:
            audio = base64.b64decode(str(data.get("audio", "")), validate=True)
        except binascii.Error:
            await self._error(connection, session, data, "invalid_value", "Invalid base64.")
            return True
        session.audio += len(audio)
        if drop is not None and session.audio >= drop:
            connection.transport.abort()  # a dropped socket: no close frame
            return False
        buffer += audio
        return True

    async def _commit(self, connection: ServerConnection, session: Session, buffer: bytearray,
                      data: dict[str, Any]) -> asyncio.Task[None] | None:  # fmt: skip
        session.commits += 1
        if len(buffer) < self.min_commit_ms * BYTES_PER_MS:
            session.empty_commits += 1
            ms = len(buffer) / BYTES_PER_MS
            said = (
                "Error committing input audio buffer: buffer too small. Expected at least "
                f"{self.min_commit_ms}ms of audio, but buffer only has {ms:.2f}ms of audio."
            )
            await self._error(connection, session, data, "input_audio_buffer_commit_empty", said)
            return None
        audio = bytes(buffer)
        buffer.clear()
        session.items.append(len(audio))
        item_id = _id("item")
        committed = {"type": "input_audio_buffer.committed",
                     "previous_item_id": session.last_item, "item_id": item_id}  # fmt: skip
        session.last_item = item_id
        await self._send(connection, session, committed)
        with self.lock:
            text = self._script.popleft() if self._script else None
            delay = self._delays.popleft() if self._delays else self.transcribe_delay
            fail, self._fail = self._fail > 0, max(0, self._fail - 1)
        if text is None:
            text = self.transcriber(audio) if self.transcriber else self.transcript
        work = self._transcribe(connection, session, item_id, text, delay, fail)
        return asyncio.get_running_loop().create_task(work)

    async def _transcribe(self, connection: ServerConnection, session: Session, item_id: str,
                          text: str, delay: float, fail: bool) -> None:  # fmt: skip
        await asyncio.sleep(delay)
        base = {"item_id": item_id, "content_index": 0}
        if fail:
            error = {"type": "server_error", "code": None, "param": None,
                     "message": "Audio file might be corrupted or unsupported"}  # fmt: skip
            await self._send(connection, session, {**base, "type": f"{TRANSCRIPTION}.failed",
                                                   "error": error})  # fmt: skip
            return
        words = text.split()
        for i, word in enumerate(words):
            delta = word if i == 0 else f" {word}"
            await self._send(connection, session, {**base, "type": f"{TRANSCRIPTION}.delta",
                                                   "delta": delta, "logprobs": None})  # fmt: skip
        usage = {"type": "tokens", "input_tokens": 20, "output_tokens": len(words),
                 "total_tokens": 20 + len(words),
                 "input_token_details": {"audio_tokens": 20, "text_tokens": 0}}  # fmt: skip
        await self._send(connection, session, {**base, "type": f"{TRANSCRIPTION}.completed",
                                               "transcript": text, "usage": usage,
                                               "logprobs": None})  # fmt: skip

    async def _error(self, connection: ServerConnection, session: Session, data: dict[str, Any],
                     code: str, message: str) -> None:  # fmt: skip
        error = {"type": "invalid_request_error", "code": code, "message": message,
                 "param": None, "event_id": data.get("event_id")}  # fmt: skip
        await self._send(connection, session, {"type": "error", "error": error})

    async def _send(self, connection: ServerConnection, session: Session,
                    message: dict[str, Any]) -> None:  # fmt: skip
        message = {"event_id": _id("event"), **message}
        session.sent.append(message)
        await connection.send(json.dumps(message))
