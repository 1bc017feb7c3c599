"""A fake of Deepgram's listen v1 WebSocket (``/v1/listen``) on 127.0.0.1, for tests: a
real socket, so the official ``deepgram`` SDK's own client can drive it too (what proves
the fake faithful).

``/v1/listen?<settings>`` checks ``Authorization: Token <key>`` (a bad one is refused
with HTTP 401 at the handshake), takes binary audio of any size, sends an interim
``Results`` every 0.5 s of audio (with ``interim_results=true``), answers ``Finalize``
after ``finalize_delay`` with a final ``Results`` (``from_finalize: true``) when audio
came since the last answer, and nothing when none did (Deepgram's docs: the answer
"typically occurs when there is a noticeable amount of audio buffered"). ``KeepAlive``
only resets the idle timer: with neither audio nor a message for ``idle_timeout`` the
socket is closed with 1011 (Deepgram's NET-0001). ``CloseStream`` gets ``Metadata`` and
a 1000 close.

    with DeepgramStub() as stub:
        stub.script("first words", "second words")   # one per answered Finalize
        stub.transcriber = lambda audio: "..."       # else this, else stub.transcript
        stub.drop_after(8000)                        # the next connection drops there
        ... DeepgramSTT(stub.api_key, base_url=stub.url) ...
        stub.sessions[-1].query["model"]; stub.sessions[-1].finalizes
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed

from testkit.socket_stub import SocketStub

BYTES_PER_SECOND = 32000  # 16 kHz s16le mono
INTERIM_EVERY = BYTES_PER_SECOND // 2  # audio bytes between interim Results
IDLE_REASON = "NET-0001: Deepgram did not receive audio data or a text message"


@dataclass
class Session:
    """One connection, as the stub saw it."""

    query: dict[str, str]
    headers: dict[str, str]
    audio: int = 0  # bytes
    messages: list[dict[str, Any]] = field(default_factory=list)  # the client's JSON
    finalizes: int = 0  # Finalize requests
    sent: list[dict[str, Any]] = field(default_factory=list)  # the stub's messages
    closed: bool = False
    closed_by_client: bool = False  # CloseStream, or the client's close frame
    idled_out: bool = False


class DeepgramStub(SocketStub):
    """The fake server (a context manager); it runs its own event loop in a thread."""

    path = "/v1/listen"
    refused_body = '{"err_code":"INVALID_AUTH","err_msg":"Invalid credentials."}\n'

    def __init__(self, api_key: str = "dg-stub-key") -> None:
        super().__init__(api_key)
        self.transcript = "hello world"
        self.transcriber: Callable[[bytes], str] | None = None
        # No published figure for a Finalize's answer is known to us; 50 ms is a guess.
        self.finalize_delay = 0.05
        self.idle_timeout = 10.0  # Deepgram's documented ~10 s without audio or a message
        self.sessions: list[Session] = []
        self._script: deque[str] = deque()
        self._drop: int | None = None

    # -- the test's side --------------------------------------------------------------------

    def script(self, *transcripts: str) -> None:
        """The next answered ``Finalize``\\ s' words, in order."""
        with self.lock:
            self._script.extend(transcripts)

    def drop_after(self, audio_bytes: int) -> None:
        """The next connection drops (no close frame) once it has this much audio."""
        with self.lock:
            self._drop = audio_bytes

    # -- the service's side -----------------------------------------------------------------

    def authorized(self, headers: Headers) -> bool:
        return headers.get("Authorization") == f"Token {self.api_key}"

    async def handle(self, connection: ServerConnection) -> None:
        request = connection.request
        assert request is not None
        query = dict(parse_qsl(urlsplit(request.path).query))
        session = Session(query, {k.lower(): v for k, v in request.headers.raw_items()})
        with self.lock:
            self.sessions.append(session)
            drop, self._drop = self._drop, None
        segment = _Segment(query.get("interim_results", "").lower() == "true")
        try:
            while True:
                try:
                    message = await asyncio.wait_for(connection.recv(), self.idle_timeout)
                except TimeoutError:
                    session.idled_out = True
                    await connection.close(1011, IDLE_REASON)
                    return
                if isinstance(message, bytes):
                    if not await self._audio(connection, session, segment, message, drop):
                        return
                elif not await self._control(connection, session, segment, message):
                    return
        except ConnectionClosed as exc:
            session.closed_by_client = exc.rcvd is not None
        finally:
            session.closed = True

    async def _audio(self, connection: ServerConnection, session: Session, segment: _Segment,
                     audio: bytes, drop: int | None) -> bool:  # fmt: skip
        session.audio += len(audio)
        if drop is not None and session.audio >= drop:
            connection.transport.abort()  # a dropped socket: no close frame
            return False
        before = len(segment.audio) // INTERIM_EVERY
        segment.audio += audio
        if segment.interim and len(segment.audio) // INTERIM_EVERY > before:
            names = self._peek().split()
            part = " ".join(names[: max(1, len(names) * len(segment.audio) // (2 * 32000))])
            await self._send(connection, session, segment.results(part, final=False))
        return True

    async def _control(self, connection: ServerConnection, session: Session, segment: _Segment,
                       text: str) -> bool:  # fmt: skip
        try:
            message = json.loads(text)
        except ValueError:
            await connection.close(1008, "DATA-0000: could not parse the message")
            return False
        session.messages.append(message)
        kind = message.get("type")
        if kind == "Finalize":
            session.finalizes += 1
            await asyncio.sleep(self.finalize_delay)
            if segment.audio:
                words = self._words(bytes(segment.audio))
                await self._send(connection, session, segment.results(words, final=True))
                segment.next()
        elif kind == "CloseStream":
            session.closed_by_client = True
            if segment.audio:
                words = self._words(bytes(segment.audio))
                results = segment.results(words, final=True, flush=False)
                await self._send(connection, session, results)
            await self._send(connection, session, _metadata(session.audio))
            await connection.close(1000)
            return False
        elif kind != "KeepAlive":
            error = {"type": "Error", "variant": "SchemaError",
                     "description": "Unknown message type", "message": text}  # fmt: skip
            await self._send(connection, session, error)
        return True

    def _peek(self) -> str:
        with self.lock:
            return self._script[0] if self._script else self.transcript

    def _words(self, audio: bytes) -> str:
        with self.lock:
            if self._script:
                return self._script.popleft()
        return self.transcriber(audio) if self.transcriber else self.transcript

    async def _send(self, connection: ServerConnection, session: Session,
                    message: dict[str, Any]) -> None:  # fmt: skip
        session.sent.append(message)
        await connection.send(json.dumps(message))


def _metadata(audio: int) -> dict[str, Any]:
    return {"type": "Metadata", "transaction_key": "deprecated", "request_id": str(uuid.uuid4()),
            "sha256": "0" * 64, "created": datetime.now(UTC).isoformat(),
            "duration": audio / BYTES_PER_SECOND, "channels": 1}  # fmt: skip


class _Segment:
    """The audio not yet finalized on one connection."""

    def __init__(self, interim: bool) -> None:
        self.interim = interim
        self.start = 0.0  # seconds on the connection where this segment starts
        self.audio = bytearray()

    def results(self, text: str, *, final: bool, flush: bool = True) -> dict[str, Any]:
        """A ``Results``: the words spread evenly over the segment's audio."""
        names = text.split()
        duration = len(self.audio) / BYTES_PER_SECOND
        step = duration / max(1, len(names))
        words = [{"word": name.lower().strip(".,?!"), "punctuated_word": name,
                  "start": round(self.start + i * step, 3),
                  "end": round(self.start + (i + 1) * step, 3), "confidence": 0.98}
                 for i, name in enumerate(names)]  # fmt: skip
        return {"type": "Results", "channel_index": [0, 1], "duration": round(duration, 3),
                "start": round(self.start, 3), "is_final": final, "speech_final": False,
                "from_finalize": final and flush,
                "channel": {"alternatives": [{"transcript": text, "confidence": 0.98,
                                              "words": words}]},
                "metadata": {"request_id": str(uuid.uuid4()), "model_uuid": str(uuid.uuid4()),
                             "model_info": {"name": "general-nova-3", "version": "stub",
                                            "arch": "nova-3"}}}  # fmt: skip

    def next(self) -> None:
        self.start += len(self.audio) / BYTES_PER_SECOND
        self.audio.clear()
