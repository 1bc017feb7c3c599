"""A live STT over one WebSocket per call: what every streaming vendor shares.

A vendor is a :class:`Dialect` (its URL, its messages, how to read its answers) and a
:class:`SocketSTT` subclass that makes one. :class:`SocketSTTStream` does the rest:

- it connects when the call opens the stream, so the first utterance does not wait for a
  handshake, and keeps that socket for the whole call (kept alive while nobody speaks);
- it holds the audio sent since the vendor last confirmed a finalize, so that a socket
  that drops is reconnected and that audio sent again (the finalize requests in their
  places): the words are not lost, and none are counted twice (finals that came before
  the drop are dropped with it, as the replay brings them again);
- each :meth:`~SocketSTTStream.finalize` waits at most ``finalize_timeout`` for the
  vendor's confirmation. A failure (refused key, unreachable, a vendor's error, no
  confirmation in time, the breaker open) raises a
  :class:`~pipeline.services.errors.ServiceError`, counts once for the breaker, and
  forgets the words of the audio up to that request: the transcriber transcribes it
  elsewhere (``PARLEY_STT_FALLBACK``) from its own recording.
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit

import numpy as np
from loguru import logger

from pipeline.services.circuit import CircuitBreaker, ServiceUnavailableError
from pipeline.services.errors import ServiceError, timed_out, unreachable
from pipeline.services.live_stt import Words
from pipeline.services.stt import Transcript
from pipeline.services.vendor_socket import Message, VendorSocket
from pipeline.task_cancel import cancel_and_wait

SERVICE = "stt"
MAX_HELD_BYTES = 60 * 32000  # 60 s of 16 kHz s16: twice the longest utterance
RECONNECT_PAUSE = 1.0  # seconds between connect attempts while a vendor is down


@dataclass(frozen=True, slots=True)
class Flushed:
    """The vendor has answered a finalize request: every final before this is in."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The vendor reported an error; the socket is given up."""

    error: ServiceError


Signal = Words | Flushed | Failed


def socket_url(base_url: str, path: str, query: dict[str, Any]) -> str:
    """``base_url``'s scheme and host (http becomes ws, https wss), then ``path`` and
    ``query``: a ``PARLEY_<VENDOR>_URL`` replaces the scheme and host only."""
    parts = urlsplit(base_url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme or "wss")
    return f"{scheme}://{parts.netloc}{path}?{urlencode(query)}"


def json_object(message: Message) -> dict[str, Any] | None:
    """A vendor's JSON text message as a dict; None for audio or anything else."""
    if isinstance(message, bytes):
        return None
    try:
        data = json.loads(message)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


class Dialect(Protocol):
    """One vendor's wire protocol, for one connection (it may keep state, such as a
    resampler). Messages are text (JSON) or bytes (audio)."""

    url: str
    headers: dict[str, str]
    keepalive_seconds: float | None

    def opening(self) -> list[Message]:
        """Sent first on each connection (the session's configuration)."""
        ...

    def audio(self, pcm: bytes) -> Message | None:
        """16 kHz s16le as the vendor takes it (None: nothing to send yet)."""
        ...

    def finalize(self) -> list[Message]:
        """Asks the vendor for the final words of all audio sent so far."""
        ...

    def keepalive(self) -> Message | None: ...

    def closing(self) -> Message | None: ...

    def read(self, message: Message) -> list[Signal]: ...


class SocketSTT(ABC):
    """The service: shared by every call, one :class:`SocketSTTStream` (and socket) per
    call. ``language`` is what :class:`~pipeline.services.stt.Transcript` reports."""

    name = "stt"

    def __init__(
        self,
        *,
        language: str | None = None,
        breaker: CircuitBreaker | None = None,
        connect_timeout: float = 5.0,
        finalize_timeout: float = 2.0,
        key_hint: str = "",
    ) -> None:
        self.language = language
        self.breaker = breaker
        self.connect_timeout = connect_timeout
        self.finalize_timeout = finalize_timeout
        self.key_hint = key_hint

    @abstractmethod
    def dialect(self) -> Dialect:
        """A new connection's wire protocol."""

    def open_live(self, on_words: Callable[[Words], None] | None = None) -> SocketSTTStream:
        return SocketSTTStream(self, on_words)

    async def transcribe(self, pcm: np.ndarray, sample_rate: int = 16000) -> Transcript:
        """One whole utterance over its own socket (a fallback's or a test's path)."""
        if sample_rate != 16000:
            raise ValueError("a live STT takes 16 kHz audio")
        stream = self.open_live()
        try:
            stream.send(pcm.astype("<i2", copy=False).tobytes())
            return await stream.finalize()
        finally:
            await stream.aclose()


class SocketSTTStream:
    """One call's socket to the vendor (see the module docstring)."""

    def __init__(self, owner: SocketSTT, on_words: Callable[[Words], None] | None) -> None:
        self._owner = owner
        self._on_words = on_words
        self._dialect = owner.dialect()
        self._socket: VendorSocket | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._retry_at = 0.0
        self._held: list[bytes] = []  # audio since the last confirmed finalize
        self._held_bytes = 0
        self._marks: deque[int] = deque()  # len(_held) at each unconfirmed request
        self._waiters: deque[asyncio.Future[str]] = deque()
        self._pending: list[str] = []  # finals since the last confirmed finalize
        self._carry: list[str] = []  # words of requests whose caller stopped waiting
        self._orphans: set[asyncio.Future[str]] = set()
        self._language: str | None = None
        self._last_sent = time.monotonic()
        self._closed = False
        self.reconnects = 0  # sockets opened after the first (for tests and /health)
        self._opened = 0
        self._keepalive: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()  # old sockets being closed
        if self._dialect.keepalive_seconds:
            self._keepalive = asyncio.get_running_loop().create_task(self._keep_alive())
        self._connect_soon()

    @property
    def connected(self) -> bool:
        return self._socket is not None and not self._socket.closed

    # -- the caller's side ------------------------------------------------------------------

    def send(self, pcm: bytes) -> None:
        if self._closed or not pcm:
            return
        self._held.append(pcm)
        self._held_bytes += len(pcm)
        while self._held_bytes > MAX_HELD_BYTES and len(self._held) > 1:
            self._forget(1)  # a bound, not a path: the transcriber finalizes at 30 s
        if self.connected:
            self._write(pcm)
        else:
            self._connect_soon()

    def finalize(self) -> Awaitable[Transcript]:
        """Asks now (so the request covers exactly the audio sent so far); the words
        come when the result is awaited."""
        if self._closed:
            return self._failed(unreachable(SERVICE, "the stream is closed"))
        if len(self._held) <= (self._marks[-1] if self._marks else 0):
            return self._words(None)  # nothing new since the last request
        waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._marks.append(len(self._held))
        self._waiters.append(waiter)
        if self.connected:
            self._request_finalize()
        else:
            self._connect_soon()
        return self._words(waiter)

    async def _failed(self, error: ServiceError) -> Transcript:
        raise error

    async def _words(self, waiter: asyncio.Future[str] | None) -> Transcript:
        text = await self._confirmed(waiter) if waiter is not None else ""
        carried, self._carry = self._carry, []
        text = " ".join([*carried, text]).strip()
        return Transcript(text, self._language or self._owner.language)

    async def aclose(self) -> None:
        self._closed = True
        self._fail_waiters(unreachable(SERVICE, "the stream is closed"))
        tasks = {t for t in (self._connecting, self._keepalive) if t is not None}
        await cancel_and_wait(tasks)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.finish(self._dialect.closing())

    async def _confirmed(self, waiter: asyncio.Future[str]) -> str:
        breaker = self._owner.breaker
        try:
            if breaker is not None:
                breaker.check()
            async with asyncio.timeout(self._owner.finalize_timeout):
                text = await asyncio.shield(waiter)
        except TimeoutError:
            error = timed_out(SERVICE, f"no final words within {self._owner.finalize_timeout:g} s")
            self._give_up(waiter)
            if breaker is not None:
                breaker.failed(error)
            raise error from None
        except ServiceError as exc:
            self._give_up(waiter)
            if breaker is not None and not isinstance(exc, ServiceUnavailableError):
                breaker.failed(exc)
            raise
        except asyncio.CancelledError:
            if breaker is not None:
                breaker.abandoned()
            # The request stands: its words go with the next finalize.
            self._orphans.add(waiter)
            raise
        if breaker is not None:
            breaker.succeeded()
        return text

    # -- the vendor's side ------------------------------------------------------------------

    def _on_message(self, message: Message) -> None:
        for signal in self._dialect.read(message):
            if isinstance(signal, Words):
                self._heard(signal)
            elif isinstance(signal, Flushed):
                self._flushed()
            else:
                logger.warning("{}: {}", self._owner.name, signal.error.detail or signal.error)
                self._fail_waiters(signal.error)
                self._drop_socket()

    def _heard(self, words: Words) -> None:
        if words.final and words.text.strip():
            self._pending.append(words.text.strip())
            self._language = words.language or self._language
        if self._on_words is not None:
            try:
                self._on_words(words)
            except Exception:  # a listener's bug costs its own call, not the words
                logger.exception("live STT: a words listener failed")

    def _flushed(self) -> None:
        if not self._marks:
            return  # the vendor's own endpoint: its words go with the next request
        text = " ".join(self._pending)
        self._pending.clear()
        self._forget(self._marks[0])
        self._marks.popleft()
        waiter = self._waiters.popleft()
        if waiter in self._orphans:  # nobody waits for it any more
            self._orphans.discard(waiter)
            self._carry.append(text)
        elif not waiter.done():
            waiter.set_result(text)

    def _on_closed(self, reason: str) -> None:
        if self._closed or self.connected:
            return  # closed by us, or an old socket's end after a new one opened
        logger.info("{}: {}", self._owner.name, reason)
        self._socket = None
        self._pending.clear()  # the replay brings these words again
        if self._held or self._waiters:
            self._connect_soon()

    # -- the socket ------------------------------------------------------------------------

    def _connect_soon(self) -> None:
        if self._closed or self.connected:
            return
        if self._connecting is not None and not self._connecting.done():
            return
        if time.monotonic() < self._retry_at and not self._waiters:
            return
        self._connecting = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        owner, dialect = self._owner, self._dialect
        try:
            if owner.breaker is not None:
                owner.breaker.check()
            socket = await VendorSocket.open(
                dialect.url, dialect.headers, self._on_message, self._on_closed,
                seconds=owner.connect_timeout, name=owner.name, service=SERVICE,
                key_hint=owner.key_hint,
            )  # fmt: skip
        except ServiceError as exc:
            self._retry_at = time.monotonic() + RECONNECT_PAUSE
            logger.warning("{}: {} {}", owner.name, exc, exc.detail)
            counted = self._waiters or isinstance(exc, ServiceUnavailableError)
            if owner.breaker is not None and not counted:  # a waiting finalize counts it
                owner.breaker.failed(exc)
            self._fail_waiters(exc)
            return
        if self._closed:
            await socket.close()
            return
        self._socket = socket
        self.reconnects += self._opened > 0
        self._opened += 1
        for message in dialect.opening():
            socket.send(message)
        self._replay()

    def _replay(self) -> None:
        """The held audio again, each unconfirmed finalize request in its place."""
        start = 0
        for mark in self._marks:
            for pcm in self._held[start:mark]:
                self._write(pcm)
            self._request_finalize()
            start = mark
        for pcm in self._held[start:]:
            self._write(pcm)

    def _write(self, pcm: bytes) -> None:
        message = self._dialect.audio(pcm)
        if message is not None and self._socket is not None:
            self._socket.send(message)
            self._last_sent = time.monotonic()

    def _request_finalize(self) -> None:
        if self._socket is not None:
            for message in self._dialect.finalize():
                self._socket.send(message)
            self._last_sent = time.monotonic()

    async def _keep_alive(self) -> None:
        seconds = self._dialect.keepalive_seconds or 5.0
        while True:
            await asyncio.sleep(seconds / 2)
            if self.connected and time.monotonic() - self._last_sent >= seconds / 2:
                message = self._dialect.keepalive()
                if message is not None and self._socket is not None:
                    self._socket.send(message)
                    self._last_sent = time.monotonic()

    # -- giving up --------------------------------------------------------------------------

    def _forget(self, count: int) -> None:
        """Drop the first ``count`` held chunks (confirmed, or given up)."""
        self._held_bytes -= sum(len(pcm) for pcm in self._held[:count])
        del self._held[:count]
        self._marks = deque(max(0, mark - count) for mark in self._marks)

    def _give_up(self, waiter: asyncio.Future[str]) -> None:
        """A finalize failed: forget its audio and start a fresh socket, so that the
        vendor's late words for it cannot join the next utterance's."""
        if waiter in self._waiters:
            index = self._waiters.index(waiter)
            mark = self._marks[index]
            del self._waiters[index]
            del self._marks[index]
            self._forget(mark)
        self._pending.clear()
        self._drop_socket()

    def _fail_waiters(self, error: ServiceError) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(error)
                waiter.exception()  # retrieved: a cancelled finalize never reads it

    def _drop_socket(self) -> None:
        socket, self._socket = self._socket, None
        self._pending.clear()
        if socket is not None:
            closing = asyncio.get_running_loop().create_task(socket.close())
            self._closing.add(closing)  # awaited by aclose(): no transport left open
            closing.add_done_callback(self._closing.discard)
