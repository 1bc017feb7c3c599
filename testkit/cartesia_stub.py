"""A fake of Cartesia's TTS WebSocket (``/tts/websocket``) on 127.0.0.1, for tests: a
real socket, so the official ``cartesia`` SDK's own client can drive it too (what proves
the fake faithful).

It checks ``Authorization: Bearer <key>`` (401 at the handshake otherwise), keeps each
``context_id``'s transcript, and on ``flush: true`` speaks the text buffered since the
last flush: ``MS_PER_CHAR`` of a tone per character that is not a space, in ``chunk``
messages of 100 ms (the first after ``first_audio_delay``, the next every ``pace``
seconds), one ``timestamps`` message with the words' times (seconds from the context's
start) after the first chunk, then ``flush_done``. ``cancel`` stops a context's audio at
once; ``continue: false`` ends it with ``done``.

    with CartesiaStub() as stub:
        stub.first_audio_delay = 0.09      # Cartesia's published ~90 ms
        stub.drop_after(2)                 # the next connection drops after 2 chunks
        ... CartesiaTTS(stub.api_key, base_url=stub.url) ...
        stub.sessions[-1].cancels; stub.sessions[-1].requests
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import numpy as np
from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed

from testkit.socket_stub import SocketStub

MS_PER_CHAR = 30
CHUNK_SECONDS = 0.1


def spoken_samples(text: str, rate: int) -> int:
    """How many samples the stub speaks for ``text``."""
    return sum(not c.isspace() for c in text) * MS_PER_CHAR * rate // 1000


@dataclass
class Context:
    """One context as the stub keeps it."""

    buffered: str = ""
    seconds: float = 0.0  # audio sent so far
    cancelled: bool = False
    flushes: int = 0
    chunks: int = 0
    speaking: asyncio.Task[None] | None = None  # the latest flush's audio being sent


@dataclass
class Session:
    """One connection, as the stub saw it."""

    query: dict[str, str]
    headers: dict[str, str]
    requests: list[dict[str, Any]] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    contexts: dict[str, Context] = field(default_factory=dict)
    closed: bool = False
    chunks: int = 0  # sent on this connection
    drop: int | None = None  # chunks after which it drops


class CartesiaStub(SocketStub):
    """The fake server (a context manager)."""

    path = "/tts/websocket"
    refused_body = '{"error": "Invalid API key", "title": "Unauthorized"}\n'

    def __init__(self, api_key: str = "cartesia-stub-key") -> None:
        super().__init__(api_key)
        self.first_audio_delay = 0.0
        self.pace = 0.0  # seconds between chunks (0: as fast as it can)
        self.sessions: list[Session] = []
        self._drop: int | None = None

    def drop_after(self, chunks: int) -> None:
        """The next connection drops (no close frame) after this many chunks."""
        with self.lock:
            self._drop = chunks

    def authorized(self, headers: Headers) -> bool:
        return headers.get("Authorization") == f"Bearer {self.api_key}"

    async def handle(self, connection: ServerConnection) -> None:
        request = connection.request
        assert request is not None
        query = dict(parse_qsl(urlsplit(request.path).query))
        session = Session(query, {k.lower(): v for k, v in request.headers.raw_items()})
        with self.lock:
            self.sessions.append(session)
            session.drop, self._drop = self._drop, None
        tasks: set[asyncio.Task[None]] = set()
        try:
            async for message in connection:
                data = json.loads(message)
                session.requests.append(data)
                task = self._request(connection, session, data)
                if task is not None:
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
        except ConnectionClosed:
            pass
        finally:
            session.closed = True
            for task in tasks:
                task.cancel()

    def _request(self, connection: ServerConnection, session: Session,
                 data: dict[str, Any]) -> asyncio.Task[None] | None:  # fmt: skip
        context_id = str(data.get("context_id"))
        context = session.contexts.setdefault(context_id, Context())
        if data.get("cancel"):
            session.cancels.append(context_id)
            context.cancelled = True
            return None
        context.buffered += str(data.get("transcript", ""))
        if data.get("flush"):
            text, context.buffered = context.buffered, ""
            context.flushes += 1
            rate = int(data["output_format"]["sample_rate"])
            speech = self._speak(connection, session, context_id, text, rate)
            context.speaking = asyncio.get_running_loop().create_task(speech)
            return context.speaking
        if data.get("continue") is False:
            return asyncio.get_running_loop().create_task(
                self._done(connection, context, context_id)
            )
        return None

    async def _done(self, connection: ServerConnection, context: Context, context_id: str) -> None:
        if context.speaking is not None:  # done comes after the context's last audio
            await asyncio.gather(context.speaking, return_exceptions=True)
        done = {"type": "done", "done": True, "status_code": 206, "context_id": context_id}
        await connection.send(json.dumps(done))

    async def _speak(self, connection: ServerConnection, session: Session, context_id: str,
                     text: str, rate: int) -> None:  # fmt: skip
        context = session.contexts[context_id]
        samples = spoken_samples(text, rate)
        tone = (np.sin(np.arange(samples) * 2 * np.pi * 220 / rate) * 8000).astype("<i2")
        words = _word_times(text, context.seconds)
        step = int(rate * CHUNK_SECONDS)
        await asyncio.sleep(self.first_audio_delay)
        base = {"done": False, "status_code": 206, "context_id": context_id,
                "flush_id": context.flushes}  # fmt: skip
        for start in range(0, samples, step):
            if context.cancelled:
                return
            if session.drop is not None and session.chunks >= session.drop:
                connection.transport.abort()  # no close frame: a dropped network
                return
            piece = tone[start : start + step].tobytes()
            chunk = {**base, "type": "chunk", "step_time": 12.0,
                     "data": base64.b64encode(piece).decode()}  # fmt: skip
            await connection.send(json.dumps(chunk))
            context.chunks += 1
            session.chunks += 1
            if start == 0 and words:
                await connection.send(json.dumps({**base, "type": "timestamps",
                                                  "word_timestamps": words}))  # fmt: skip
            if self.pace:
                await asyncio.sleep(self.pace)
        context.seconds += samples / rate
        if not context.cancelled:
            flushed = {**base, "type": "flush_done", "flush_done": True}
            await connection.send(json.dumps(flushed))


def _word_times(text: str, offset: float) -> dict[str, list[Any]]:
    """The words of ``text`` and their times, from ``offset`` seconds on."""
    words: list[str] = []
    starts: list[float] = []
    ends: list[float] = []
    spoken = 0
    for match in re.finditer(r"\S+", text):
        words.append(match.group())
        starts.append(round(offset + spoken * MS_PER_CHAR / 1000, 4))
        spoken += len(match.group())
        ends.append(round(offset + spoken * MS_PER_CHAR / 1000, 4))
    return {"words": words, "start": starts, "end": ends}
