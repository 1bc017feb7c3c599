"""One WebSocket to a realtime endpoint: events out in order through a bounded queue,
server events in to a handler, and a clear end when either side closes.

Uses ``websockets`` (already the server's WebSocket library under uvicorn). The send
queue is bounded: a provider that stops reading must not grow a call's memory without
limit (50 s of the caller's audio at 10 appends a second fits well under the bound).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from loguru import logger
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from pipeline.realtime.wire import ServerEvent, read

MAX_QUEUED = 512  # client events waiting to be sent
MAX_MESSAGE = 16 * 1024 * 1024  # a server event (a long audio delta is a few hundred kB)


class RealtimeConnection:
    """A connected socket; :meth:`send` queues, ``on_event`` gets each server event and
    ``on_closed`` the reason once the socket is gone (for whatever cause)."""

    def __init__(
        self,
        socket: ClientConnection,
        on_event: Callable[[ServerEvent], None],
        on_closed: Callable[[str], None],
    ) -> None:
        self._socket = socket
        self._on_event = on_event
        self._on_closed = on_closed
        self._queue: asyncio.Queue[str] = asyncio.Queue(MAX_QUEUED)
        self.closed = False
        self._tasks = [
            asyncio.create_task(self._read(), name="realtime-read"),
            asyncio.create_task(self._write(), name="realtime-write"),
        ]

    @classmethod
    async def open(
        cls,
        url: str,
        headers: dict[str, str],
        on_event: Callable[[ServerEvent], None],
        on_closed: Callable[[str], None],
        seconds: float,
    ) -> RealtimeConnection:
        socket = await asyncio.wait_for(
            connect(url, additional_headers=headers, max_size=MAX_MESSAGE, open_timeout=None),
            seconds,
        )
        return cls(socket, on_event, on_closed)

    def send(self, event: dict[str, Any]) -> None:
        """Queue one client event; a full queue ends the connection (the provider is not
        reading) rather than buffering without bound."""
        if self.closed:
            return
        try:
            self._queue.put_nowait(json.dumps(event))
        except asyncio.QueueFull:
            self._end("the realtime endpoint stopped reading (send queue full)")

    async def close(self) -> None:
        self._end("closed by Parley")
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._socket.close()

    async def _read(self) -> None:
        try:
            async for message in self._socket:
                try:
                    self._on_event(read(message))
                except Exception:  # one bad handler costs one event, not the call
                    logger.exception("realtime: handling a server event failed")
            self._end(self._close_reason())
        except ConnectionClosed:
            self._end(self._close_reason())

    async def _write(self) -> None:
        try:
            while True:
                await self._socket.send(await self._queue.get())
        except ConnectionClosed:
            self._end(self._close_reason())

    def _close_reason(self) -> str:
        code = self._socket.close_code
        reason = self._socket.close_reason or ""
        return f"the realtime endpoint closed the connection ({code} {reason})".strip()

    def _end(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self._on_closed(reason)
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
