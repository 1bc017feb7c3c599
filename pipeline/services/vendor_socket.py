"""One WebSocket to a speech vendor: messages out in order through a bounded queue,
messages in to a handler, and one clear end, whichever side closes.

Uses ``websockets`` (the server's WebSocket library under uvicorn), like
:mod:`pipeline.realtime.connection`, but carries text and binary messages as they are
(a vendor's audio goes as binary frames, its control messages as JSON text). The queue
is bounded: a vendor that stops reading must not grow a call's memory without limit.
A refused handshake becomes the :class:`~pipeline.services.errors.ServiceError` its
status calls for (401/403: the key, named by ``key_hint``); any other failure to
connect is "unreachable".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from loguru import logger
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from pipeline.services.errors import ServiceAuthError, ServiceError, from_status, unreachable

MAX_QUEUED = 1024  # messages waiting to be sent: 20 s of 20 ms audio frames
MAX_MESSAGE = 4 * 1024 * 1024  # a vendor's message (a long audio chunk is ~100 kB)
CLOSE_SECONDS = 2.0  # the closing handshake, at most

Message = str | bytes


def handshake_error(exc: BaseException, service: str, key_hint: str) -> ServiceError:
    """What a failed connect means for the user (the cause goes to ``detail``)."""
    if isinstance(exc, InvalidStatus):
        response = exc.response
        body = response.body.decode("utf-8", "replace") if response.body else ""
        error = from_status(service, response.status_code, body)
        if isinstance(error, ServiceAuthError) and key_hint:
            error = ServiceAuthError(
                service,
                error.message.replace("Check PARLEY_OPENAI_API_KEY.", key_hint),
                status=error.status,
                detail=body,
            )
        return error
    if isinstance(exc, TimeoutError):
        return unreachable(service, "the WebSocket handshake timed out")
    return unreachable(service, f"{type(exc).__name__}: {exc}")


class VendorSocket:
    """A connected socket; :meth:`send` queues, ``on_message`` gets each message and
    ``on_closed`` the reason once the socket is gone (for whatever cause)."""

    def __init__(
        self,
        socket: ClientConnection,
        on_message: Callable[[Message], None],
        on_closed: Callable[[str], None],
        name: str,
    ) -> None:
        self._socket = socket
        self._on_message = on_message
        self._on_closed = on_closed
        self._name = name
        self._queue: asyncio.Queue[Message] = asyncio.Queue(MAX_QUEUED)
        self.closed = False
        self._tasks = [
            asyncio.create_task(self._read(), name=f"{name}-read"),
            asyncio.create_task(self._write(), name=f"{name}-write"),
        ]

    @classmethod
    async def open(
        cls,
        url: str,
        headers: dict[str, str],
        on_message: Callable[[Message], None],
        on_closed: Callable[[str], None],
        *,
        seconds: float,
        name: str,
        service: str,
        key_hint: str = "",
    ) -> VendorSocket:
        """Connect within ``seconds``; a failure raises a :class:`ServiceError`."""
        try:
            socket = await asyncio.wait_for(
                connect(url, additional_headers=headers, max_size=MAX_MESSAGE, open_timeout=None),
                seconds,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise handshake_error(exc, service, key_hint) from exc
        return cls(socket, on_message, on_closed, name)

    def send(self, message: Message) -> None:
        """Queue one message; a full queue ends the connection (the vendor is not
        reading) rather than buffering without bound."""
        if self.closed:
            return
        try:
            self._queue.put_nowait(message)
        except asyncio.QueueFull:
            self._end(f"{self._name}: the vendor stopped reading (send queue full)")

    async def drain(self, seconds: float = CLOSE_SECONDS) -> None:
        """Wait (at most ``seconds``) until every queued message has been written."""
        async with asyncio.timeout(seconds):
            await self._queue.join()

    async def finish(self, last: Message | None) -> None:
        """Send ``last`` (the vendor's goodbye, if it has one), give it time to go out
        (at most ``CLOSE_SECONDS``), then close."""
        if last is not None and not self.closed:
            self.send(last)
            try:
                await self.drain()
            except TimeoutError:
                pass
        await self.close()

    async def close(self) -> None:
        self._end("closed by Parley")
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            async with asyncio.timeout(CLOSE_SECONDS):
                await self._socket.close()
        except TimeoutError:
            pass

    async def _read(self) -> None:
        try:
            async for message in self._socket:
                try:
                    self._on_message(message)
                except Exception:  # one bad handler costs one message, not the call
                    logger.exception("{}: handling a message failed", self._name)
        except ConnectionClosed:
            pass
        self._end(self._close_reason())

    async def _write(self) -> None:
        try:
            while True:
                await self._socket.send(await self._queue.get())
                self._queue.task_done()
        except ConnectionClosed:
            self._end(self._close_reason())

    def _close_reason(self) -> str:
        code = self._socket.close_code
        reason = self._socket.close_reason or ""
        return f"{self._name}: the vendor closed the connection ({code} {reason})".strip()

    def _end(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self._on_closed(reason)
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
