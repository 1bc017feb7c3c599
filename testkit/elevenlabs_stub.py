"""A fake of ElevenLabs' stream-input TTS WebSockets on 127.0.0.1, for tests: a real
socket, so the official ``elevenlabs`` SDK's own client can drive it too.

``/v1/text-to-speech/{voice}/multi-stream-input?<settings>`` checks ``xi-api-key`` (a bad
one is refused with HTTP 401 at the handshake) and keeps contexts: text is buffered per
context, and each flush is spoken (after ``first_audio_delay``, the vendor's latency) as
``char_ms`` of a tone per character of the text (its spaces collapsed, one trailing
space, as the vendor aligns it), s16le at the query's ``pcm_<rate>``, in chunks of
``chunk_chars`` characters, each with its ``alignment`` (times relative to the chunk, as
the SDK's ``Alignment`` says) and a ``normalizedAlignment`` with a leading space. A
flush already under way is finished after ``close_context`` (the vendor's documented
behaviour), then ``{"isFinal": true, "contextId": ...}``. ``close_socket`` finishes every
context and closes with 1000. ``/v1/text-to-speech/{voice}/stream-input`` is the
single-context endpoint the SDK's ``convert_realtime`` speaks: ``{"text": ""}`` ends the
input, which is spoken, then ``isFinal`` and a 1000 close.

    with ElevenLabsStub() as stub:
        stub.first_audio_delay = 0.2                 # before each flush's first chunk
        stub.drop_after(1)                           # the next connection drops there
        ... ElevenLabsTTS(stub.api_key, base_url=stub.url) ...
        stub.sessions[-1].query["model_id"]; stub.sessions[-1].cancels
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
from websockets.http11 import Request, Response

from testkit.socket_stub import SocketStub

PATH = re.compile(r"^/v1/text-to-speech/([^/]+)/(multi-stream-input|stream-input)$")
SINGLE = ""  # the context id of the single-context endpoint


def spoken(text: str) -> str:
    """The text as the stub speaks and aligns it: spaces collapsed, one trailing."""
    words = text.split()
    return " ".join(words) + " " if words else ""


def tone(samples: int, rate: int, start: int = 0) -> bytes:
    """A 440 Hz s16le tone: deterministic audio of a known length."""
    t = (start + np.arange(samples)) / rate
    return (8000 * np.sin(2 * np.pi * 440 * t)).astype("<i2").tobytes()


@dataclass
class Session:
    """One connection, as the stub saw it."""

    path: str
    voice: str
    query: dict[str, str]
    headers: dict[str, str]
    messages: list[dict[str, Any]] = field(default_factory=list)  # the client's JSON
    sent: list[dict[str, Any]] = field(default_factory=list)  # the stub's messages
    flushed: list[tuple[str, str]] = field(default_factory=list)  # (context, text as spoken)
    cancels: list[str] = field(default_factory=list)  # contexts closed with audio to come
    closed: bool = False
    closed_by_client: bool = False


class _Context:
    """One context: its buffered text and the flushes it is speaking, in order."""

    def __init__(self) -> None:
        self.buffer = ""
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()  # None: closed
        self.task: asyncio.Task[None] | None = None
        self.busy = 0  # flushes queued or being spoken


class ElevenLabsStub(SocketStub):
    """The fake server (a context manager); it runs its own event loop in a thread."""

    refused_body = '{"detail":{"status":"invalid_api_key","message":"Invalid API key"}}\n'

    def __init__(self, api_key: str = "xi-stub-key") -> None:
        super().__init__(api_key)
        # Flash v2.5's model latency is ~75 ms (ElevenLabs' figure), before the network's.
        self.first_audio_delay = 0.05
        self.char_ms = 60
        self.chunk_chars = 5
        self.sessions: list[Session] = []
        self._drop: int | None = None

    # -- the test's side --------------------------------------------------------------------

    def samples(self, text: str, rate: int = 24000) -> int:
        """How many samples the stub speaks for one sentence's ``text``."""
        return len(spoken(text)) * rate * self.char_ms // 1000

    def drop_after(self, chunks: int) -> None:
        """The next connection drops (no close frame) once it has sent this many audio
        chunks (0: at its first flush, before any audio)."""
        with self.lock:
            self._drop = chunks

    # -- the service's side -----------------------------------------------------------------

    def serves(self, path: str) -> bool:
        return PATH.match(path) is not None

    def authorized(self, headers: Headers) -> bool:
        return headers.get("xi-api-key") == self.api_key

    def _check(self, connection: ServerConnection, request: Request) -> Response | None:
        refused = super()._check(connection, request)
        if refused is not None:
            return refused
        output = dict(parse_qsl(urlsplit(request.path).query)).get("output_format", "mp3_44100_128")
        if not re.fullmatch(r"pcm_\d+", output):
            return connection.respond(400, "the stub speaks pcm_<rate> only\n")
        return None

    async def handle(self, connection: ServerConnection) -> None:
        request = connection.request
        assert request is not None
        parts = urlsplit(request.path)
        match = PATH.match(parts.path)
        assert match is not None
        query = dict(parse_qsl(parts.query))
        headers = {k.lower(): v for k, v in request.headers.raw_items()}
        session = Session(parts.path, match.group(1), query, headers)
        with self.lock:
            self.sessions.append(session)
            drop, self._drop = self._drop, None
        speaker = _Speaker(self, connection, session, drop, match.group(2) == "stream-input")
        try:
            async for message in connection:
                if isinstance(message, str) and not await speaker.take(message):
                    break
        except ConnectionClosed as exc:
            session.closed_by_client = exc.rcvd is not None
        finally:
            session.closed = True
            speaker.stop()


class _Speaker:
    """One connection's contexts and what they say."""

    def __init__(self, stub: ElevenLabsStub, connection: ServerConnection, session: Session,
                 drop: int | None, single: bool) -> None:  # fmt: skip
        self.stub, self.connection, self.session = stub, connection, session
        self.drop = drop
        self.single = single
        self.rate = int(session.query.get("output_format", "pcm_24000")[4:])
        self.contexts: dict[str, _Context] = {}

    async def take(self, text: str) -> bool:
        """One client message; False once the connection is over."""
        try:
            message = json.loads(text)
        except ValueError:
            await self.connection.close(1008, "invalid JSON")
            return False
        self.session.messages.append(message)
        if message.get("close_socket"):
            self.session.closed_by_client = True
            await self._finish_all()
            return False
        name = SINGLE if self.single else message.get("context_id", message.get("contextId"))
        if not isinstance(name, str):
            await self._send({"message": "a context_id is needed", "error": "invalid_message",
                              "code": 1008})  # fmt: skip
            return True
        context = self.contexts.get(name)
        if context is None:
            context = self.contexts[name] = _Context()
            context.task = asyncio.create_task(self._speak(name, context))
        if message.get("close_context"):
            if context.busy:
                self.session.cancels.append(name)
            self.contexts.pop(name, None)
            context.queue.put_nowait(None)
            return True
        context.buffer += str(message.get("text") or "")
        ended = self.single and message.get("text") == ""  # stream-input's end of input
        if message.get("flush") or ended:
            if context.buffer.strip():
                context.busy += 1
                context.queue.put_nowait(context.buffer)
            context.buffer = ""
        if ended:
            self.contexts.pop(name, None)
            context.queue.put_nowait(None)
            if context.task is not None:
                await context.task
            await self.connection.close(1000)
            return False
        return True

    async def _speak(self, name: str, context: _Context) -> None:
        """Speaks each flush in turn; ``isFinal`` once the context is closed."""
        try:
            while (text := await context.queue.get()) is not None:
                self.session.flushed.append((name, spoken(text)))
                await self._flush(name, spoken(text))
                context.busy -= 1
            final: dict[str, Any] = {"isFinal": True}
            if name != SINGLE:
                final["contextId"] = name
            await self._send(final)
        except ConnectionClosed:
            pass

    async def _flush(self, name: str, text: str) -> None:
        await asyncio.sleep(self.stub.first_audio_delay)
        per_char = self.rate * self.stub.char_ms // 1000
        step = self.stub.chunk_chars
        starts = list(range(0, len(text), step))
        if len(starts) > 1 and not text[starts[-1] :].strip():
            starts.pop()  # the trailing space ends the last chunk, as the vendor aligns it
        for n, at in enumerate(starts):
            upto = starts[n + 1] if n + 1 < len(starts) else len(text)
            if self.drop is not None and self.drop <= 0:
                self.connection.transport.abort()  # a dropped socket: no close frame
                raise ConnectionClosed(None, None)
            chars = list(text[at:upto])
            times = [i * self.stub.char_ms for i in range(len(chars))]
            alignment = {"chars": chars, "charStartTimesMs": times,
                         "charDurationsMs": [self.stub.char_ms] * len(chars)}  # fmt: skip
            normalized = {"chars": [" ", *chars], "charStartTimesMs": [0, *times],
                          "charDurationsMs": [0] + [self.stub.char_ms] * len(chars)}  # fmt: skip
            audio = tone(per_char * len(chars), self.rate, at * per_char)
            message: dict[str, Any] = {
                "audio": base64.b64encode(audio).decode(),
                "alignment": alignment,
                "normalizedAlignment": normalized,
            }
            if name != SINGLE:
                message["contextId"] = name
            await self._send(message)
            if self.drop is not None:
                self.drop -= 1
            await asyncio.sleep(0.005)  # chunks come spread out, as a vendor's do

    async def _finish_all(self) -> None:
        for context in self.contexts.values():
            context.queue.put_nowait(None)
        tasks = [c.task for c in self.contexts.values() if c.task is not None]
        self.contexts.clear()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.connection.close(1000)

    async def _send(self, message: dict[str, Any]) -> None:
        self.session.sent.append(message)
        await self.connection.send(json.dumps(message))

    def stop(self) -> None:
        for context in self.contexts.values():
            if context.task is not None:
                context.task.cancel()
