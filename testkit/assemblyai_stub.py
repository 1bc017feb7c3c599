"""A fake of AssemblyAI's Universal-Streaming v3 WebSocket on 127.0.0.1, for tests: a
real socket, so the official ``assemblyai`` SDK's ``StreamingClient`` can drive it too
(what proves the fake faithful).

``/v3/ws?<settings>`` checks ``Authorization`` (the raw key, as the SDK sends it; a bad
one is refused with HTTP 401 at the handshake), sends ``Begin``, takes binary audio
frames of 50-1000 ms (others close with 3007, as the service does), sends an interim
``Turn`` every few frames, answers ``ForceEndpoint`` after ``endpoint_delay`` with an
end-of-turn ``Turn`` (twice with ``format_turns=true``: unformatted, then formatted) when
audio came since the last end, and nothing when none did; ``Terminate`` gets
``Termination`` and a 1000 close.

    with AssemblyAIStub() as stub:
        stub.script("first words", "second words")   # one per answered ForceEndpoint
        stub.transcriber = lambda audio: "..."       # else this, else stub.transcript
        stub.drop_after(8000)                        # the next connection drops there
        ... AssemblyAISTT(stub.api_key, base_url=stub.url) ...
        stub.sessions[-1].query["sample_rate"]; stub.sessions[-1].frames
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed

from testkit.socket_stub import SocketStub

BYTES_PER_MS = 32  # 16 kHz s16le mono
INTERIM_EVERY = 5  # frames between interim Turns


@dataclass
class Session:
    """One connection, as the stub saw it."""

    query: dict[str, str]
    headers: dict[str, str]
    audio: int = 0  # bytes
    frames: list[int] = field(default_factory=list)  # each frame's size, bytes
    messages: list[dict[str, Any]] = field(default_factory=list)  # the client's JSON
    forces: int = 0  # ForceEndpoint requests
    sent: list[dict[str, Any]] = field(default_factory=list)  # the stub's messages
    closed: bool = False


class AssemblyAIStub(SocketStub):
    """The fake server (a context manager); it runs its own event loop in a thread."""

    path = "/v3/ws"
    refused_body = '{"error": "Invalid API key"}\n'

    def __init__(self, api_key: str = "aai-stub-key") -> None:
        super().__init__(api_key)
        self.transcript = "hello world"
        self.transcriber: Callable[[bytes], str] | None = None
        self.endpoint_delay = 0.05
        self.sessions: list[Session] = []
        self._script: deque[str] = deque()
        self._drop: int | None = None

    # -- the test's side --------------------------------------------------------------------

    def script(self, *transcripts: str) -> None:
        """The next answered ``ForceEndpoint``\\ s' words, in order."""
        with self.lock:
            self._script.extend(transcripts)

    def drop_after(self, audio_bytes: int) -> None:
        """The next connection drops (no close frame) once it has this much audio."""
        with self.lock:
            self._drop = audio_bytes

    # -- the service's side -----------------------------------------------------------------

    def authorized(self, headers: Headers) -> bool:
        return headers.get("Authorization") == self.api_key

    async def handle(self, connection: ServerConnection) -> None:
        request = connection.request
        assert request is not None
        query = dict(parse_qsl(urlsplit(request.path).query))
        session = Session(query, {k.lower(): v for k, v in request.headers.raw_items()})
        with self.lock:
            self.sessions.append(session)
            drop, self._drop = self._drop, None
        turn = _Turn(query.get("format_turns", "").lower() == "true")  # the SDK sends "True"
        try:
            begin = {"type": "Begin", "id": str(uuid.uuid4()),
                     "expires_at": int(time.time()) + 3600}  # fmt: skip
            await self._send(connection, session, begin)
            async for message in connection:
                if isinstance(message, bytes):
                    if not await self._audio(connection, session, turn, message, drop):
                        return
                elif not await self._control(connection, session, turn, message):
                    return
        except ConnectionClosed:
            pass
        finally:
            session.closed = True

    async def _audio(self, connection: ServerConnection, session: Session, turn: _Turn,
                     frame: bytes, drop: int | None) -> bool:  # fmt: skip
        session.frames.append(len(frame))
        if not 50 * BYTES_PER_MS <= len(frame) <= 1000 * BYTES_PER_MS:
            await connection.close(3007, "Audio chunk duration violation")
            return False
        session.audio += len(frame)
        if drop is not None and session.audio >= drop:
            connection.transport.abort()  # a dropped socket: no close frame
            return False
        turn.audio += frame
        turn.frames += 1
        if turn.frames % INTERIM_EVERY == 0:
            await self._send(connection, session, turn.message("", end=False))
        return True

    async def _control(self, connection: ServerConnection, session: Session, turn: _Turn,
                       text: str) -> bool:  # fmt: skip
        try:
            message = json.loads(text)
        except ValueError:
            await connection.close(4100, "Endpoint received invalid JSON")
            return False
        session.messages.append(message)
        kind = message.get("type")
        if kind == "ForceEndpoint":
            session.forces += 1
            await asyncio.sleep(self.endpoint_delay)
            if turn.audio:
                words = self._words(bytes(turn.audio))
                for formatted in (False, True) if turn.format else (False,):
                    await self._send(connection, session, turn.message(words, True, formatted))
                turn.next()
        elif kind == "Terminate":
            seconds = session.audio // (BYTES_PER_MS * 1000)
            end = {"type": "Termination", "audio_duration_seconds": seconds,
                   "session_duration_seconds": seconds}  # fmt: skip
            await self._send(connection, session, end)
            await connection.close(1000)
            return False
        elif kind not in ("KeepAlive", "UpdateConfiguration"):
            await connection.close(4101, "Endpoint received a message with an invalid schema")
            return False
        return True

    def _words(self, audio: bytes) -> str:
        with self.lock:
            if self._script:
                return self._script.popleft()
        return self.transcriber(audio) if self.transcriber else self.transcript

    async def _send(self, connection: ServerConnection, session: Session,
                    message: dict[str, Any]) -> None:  # fmt: skip
        session.sent.append(message)
        await connection.send(json.dumps(message))


class _Turn:
    """The turn in progress on one connection."""

    def __init__(self, format_turns: bool) -> None:
        self.format = format_turns
        self.order = 0
        self.start_ms = 0  # where this turn's audio starts on the connection
        self.audio = bytearray()
        self.frames = 0

    def message(self, text: str, end: bool, formatted: bool = False) -> dict[str, Any]:
        """A ``Turn``: the words spread evenly over the turn's audio, times in ms."""
        names = text.split()
        span = len(self.audio) // BYTES_PER_MS
        step = span / max(1, len(names))
        words = [{"text": name, "start": self.start_ms + int(i * step),
                  "end": self.start_ms + int((i + 1) * step), "confidence": 0.95,
                  "word_is_final": end} for i, name in enumerate(names)]  # fmt: skip
        transcript = text
        if formatted and text:
            transcript = text[0].upper() + text[1:] + "."
            for word in words:
                word["text"] = str(word["text"]).capitalize() if word is words[0] else word["text"]
        return {"type": "Turn", "turn_order": self.order, "turn_is_formatted": formatted,
                "end_of_turn": end, "transcript": transcript if end else "",
                "end_of_turn_confidence": 1.0 if end else 0.1, "words": words}  # fmt: skip

    def next(self) -> None:
        self.start_ms += len(self.audio) // BYTES_PER_MS
        self.order += 1
        self.audio.clear()
        self.frames = 0
