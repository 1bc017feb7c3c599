"""A fake of Deepgram Aura's speak v1 WebSocket (``/v1/speak``) on 127.0.0.1, for tests:
a real socket, so the official ``deepgram`` SDK's own client can drive it too (what
proves the fake faithful).

``/v1/speak?model=...&encoding=linear16&sample_rate=...`` checks ``Authorization: Token
<key>`` (a bad one is refused with HTTP 401 at the handshake; another encoding or rate
with 400) and sends ``Metadata`` first. ``Speak`` texts are buffered; ``Flush`` speaks
the buffer: after ``first_audio_delay``, :func:`tone` of it (60 ms per character, s16le
mono at the requested rate) in binary frames of 100 ms, ``pace`` seconds apart, then
``{"type": "Flushed", "sequence_id": n}``. ``Clear`` is acted on after ``clear_delay``
(the vendor's lag: audio keeps coming meanwhile): the rest of the audio and the buffered
text are dropped and ``{"type": "Cleared", "sequence_id": n}`` sent; no audio of the
cleared text follows it. ``Close`` ends the socket with 1000. The ``sequence_id``
numbering (flushes, clears, each from 0 per connection) is a guess.

    with DeepgramTTSStub() as stub:
        stub.pace = 0.01                 # seconds between 100 ms frames
        stub.drop_after(0)               # the next connection drops before its audio
        ... DeepgramTTS(stub.api_key, base_url=stub.url) ...
        stub.sessions[-1].texts; stub.sessions[-1].clears; tone("hi", 24000)
"""

from __future__ import annotations

import asyncio
import json
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import numpy as np
from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from testkit.socket_stub import SocketStub

SECONDS_PER_CHAR = 0.06
FRAME_SECONDS = 0.1
RATES = ("8000", "16000", "24000", "32000", "48000")


def tone(text: str, rate: int) -> bytes:
    """The stub's audio for ``text``: 60 ms per character of a tone whose pitch depends
    on the text (so one sentence's audio cannot pass for another's), s16le."""
    samples = round(len(text) * SECONDS_PER_CHAR * rate)
    pitch = 200 + zlib.crc32(text.encode()) % 600
    wave = 8000 * np.sin(2 * np.pi * pitch * np.arange(samples) / rate)
    return wave.astype("<i2").tobytes()


@dataclass
class Session:
    """One connection, as the stub saw it."""

    query: dict[str, str]
    headers: dict[str, str]
    messages: list[dict[str, Any]] = field(default_factory=list)  # the client's JSON
    texts: list[str] = field(default_factory=list)  # each Speak's text
    flushes: int = 0
    clears: int = 0
    audio: int = 0  # bytes of audio sent
    late_audio: int = 0  # bytes sent after a Clear arrived, before it was acted on
    sent: list[dict[str, Any]] = field(default_factory=list)  # the stub's JSON
    closed: bool = False
    closed_by_client: bool = False  # Close, or the client's close frame


class _Speaker:
    """One connection's text buffer and the flushes being spoken, in order."""

    def __init__(self, stub: DeepgramTTSStub, connection: ServerConnection,
                 session: Session, drop: int | None) -> None:  # fmt: skip
        self.stub, self.connection, self.session, self.drop = stub, connection, session, drop
        self.rate = int(session.query.get("sample_rate", "24000"))
        self.buffer: list[str] = []
        self.jobs: asyncio.Queue[tuple[int, str, int]] = asyncio.Queue()
        self.generation = 0  # bumped by each Clear: older jobs are dropped
        self.clearing = False  # a Clear arrived and is not yet acted on
        self.lock = asyncio.Lock()  # a frame and a Cleared never cross
        self.task = asyncio.create_task(self._speak())

    def flush(self) -> None:
        self.jobs.put_nowait((self.generation, "".join(self.buffer), self.session.flushes))
        self.session.flushes += 1
        self.buffer.clear()

    async def clear(self) -> None:
        sequence = self.session.clears
        self.session.clears += 1
        self.clearing = True
        await asyncio.sleep(self.stub.clear_delay)
        async with self.lock:
            self.generation += 1
            self.clearing = False
            self.buffer.clear()
            await self.send({"type": "Cleared", "sequence_id": sequence})

    async def send(self, message: dict[str, Any]) -> None:
        self.session.sent.append(message)
        await self.connection.send(json.dumps(message))

    async def _speak(self) -> None:
        step = int(self.rate * FRAME_SECONDS) * 2
        while True:
            generation, text, sequence = await self.jobs.get()
            if generation != self.generation:
                continue
            await asyncio.sleep(self.stub.first_audio_delay)
            pcm = tone(text, self.rate)
            for start in range(0, len(pcm), step):
                async with self.lock:
                    if generation != self.generation:
                        break
                    if self.drop is not None and self.session.audio >= self.drop:
                        self.connection.transport.abort()  # a dropped socket: no close frame
                        return
                    frame = pcm[start : start + step]
                    self.session.audio += len(frame)
                    self.session.late_audio += len(frame) if self.clearing else 0
                    await self.connection.send(frame)
                await asyncio.sleep(self.stub.pace)
            async with self.lock:
                if generation == self.generation:
                    await self.send({"type": "Flushed", "sequence_id": sequence})


class DeepgramTTSStub(SocketStub):
    """The fake server (a context manager); it runs its own event loop in a thread."""

    path = "/v1/speak"
    refused_body = (
        json.dumps({"err_code": "INVALID_AUTH", "err_msg": "Invalid credentials."}) + "\n"
    )

    def __init__(self, api_key: str = "dg-tts-stub-key") -> None:
        super().__init__(api_key)
        self.first_audio_delay = 0.0  # seconds from a Flush to its first frame
        self.pace = 0.0  # seconds between frames
        self.clear_delay = 0.0  # seconds from a Clear to its effect
        self.sessions: list[Session] = []
        self._drop: int | None = None

    # -- the test's side --------------------------------------------------------------------

    def drop_after(self, audio_bytes: int) -> None:
        """The next connection drops (no close frame) once it has sent this much audio
        (0: before its first frame)."""
        with self.lock:
            self._drop = audio_bytes

    # -- the service's side -----------------------------------------------------------------

    def authorized(self, headers: Headers) -> bool:
        return headers.get("Authorization") == f"Token {self.api_key}"

    def _check(self, connection: ServerConnection, request: Request) -> Response | None:
        refused = super()._check(connection, request)
        if refused is not None:
            return refused
        query = dict(parse_qsl(urlsplit(request.path).query))
        if (
            query.get("encoding", "linear16") != "linear16"
            or query.get("sample_rate", "24000") not in RATES
        ):
            return _json_response(connection, 400, "Bad Request", "unsupported audio format")
        return None

    async def handle(self, connection: ServerConnection) -> None:
        request = connection.request
        assert request is not None
        query = dict(parse_qsl(urlsplit(request.path).query))
        session = Session(query, {k.lower(): v for k, v in request.headers.raw_items()})
        with self.lock:
            self.sessions.append(session)
            drop, self._drop = self._drop, None
        speaker = _Speaker(self, connection, session, drop)
        try:
            await speaker.send(_metadata(query.get("model", "aura-asteria-en")))
            async for message in connection:
                if not await self._control(speaker, message):
                    return
        except ConnectionClosed as exc:
            session.closed_by_client = exc.rcvd is not None
        finally:
            session.closed = True
            speaker.task.cancel()

    async def _control(self, speaker: _Speaker, message: str | bytes) -> bool:
        session = speaker.session
        try:
            data = json.loads(message)
        except ValueError:
            await speaker.connection.close(1008, "DATA-0000: could not parse the message")
            return False
        session.messages.append(data)
        kind = data.get("type")
        if kind == "Speak":
            session.texts.append(str(data.get("text", "")))
            speaker.buffer.append(session.texts[-1])
        elif kind == "Flush":
            speaker.flush()
        elif kind == "Clear":
            await speaker.clear()  # in order: later text waits for it, as at Deepgram
        elif kind == "Close":
            session.closed_by_client = True
            await speaker.connection.close(1000)
            return False
        else:
            await speaker.send({"type": "Warning", "code": "UNKNOWN_MESSAGE",
                                "description": f"Unknown message type {kind!r}"})  # fmt: skip
        return True


def _json_response(connection: ServerConnection, status: int, code: str, text: str) -> Response:
    body = json.dumps({"err_code": code, "err_msg": text}) + "\n"
    response = connection.respond(status, body)
    response.headers = Headers({"Content-Type": "application/json"})
    return response


def _metadata(model: str) -> dict[str, Any]:
    return {"type": "Metadata", "request_id": str(uuid.uuid4()), "model_name": model,
            "model_version": "stub", "model_uuid": str(uuid.uuid4())}  # fmt: skip
