"""The frame of a fake vendor WebSocket on 127.0.0.1: its own event loop in a thread,
one path (or those ``serves`` accepts), a key checked at the handshake (401 with a JSON
body when it is wrong). A stub that checks more (a query's settings) overrides ``_check``
and calls ``super()._check`` first.

    class MyStub(SocketStub):
        path = "/v1/thing"
        def authorized(self, headers): return headers.get("X-Key") == self.api_key
        async def handle(self, connection): ...
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response


class SocketStub(ABC):
    """A context manager: ``url`` (``ws://127.0.0.1:<port>``) is set inside it."""

    path = "/"
    refused_body = '{"error": "invalid api key"}\n'

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.refused = False  # every handshake refused (401), whatever the key
        self.handshakes = 0  # attempted, refused ones included
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._server: Server | None = None
        self.url = ""

    @abstractmethod
    def authorized(self, headers: Headers) -> bool: ...

    @abstractmethod
    async def handle(self, connection: ServerConnection) -> None: ...

    def refuse_key(self) -> None:
        """Every handshake from now on is refused (401), whatever the key."""
        self.refused = True

    def serves(self, path: str) -> bool:
        """Whether the stub answers at ``path`` (the request's, without its query); a
        stub with more than one path overrides it."""
        return path == self.path

    def __enter__(self) -> Self:
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        self.url = f"ws://127.0.0.1:{port}"
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()

    async def _start(self) -> int:
        # A short close_timeout: a client whose loop is blocked cannot answer the close.
        self._server = await serve(self.handle, "127.0.0.1", 0, process_request=self._check,
                                   close_timeout=0.5)  # fmt: skip
        return int(self._server.sockets[0].getsockname()[1])

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _check(self, connection: ServerConnection, request: Request) -> Response | None:
        self.handshakes += 1
        if not self.serves(urlsplit(request.path).path):
            return connection.respond(404, "Not Found\n")
        if self.refused or not self.authorized(request.headers):
            response = connection.respond(401, self.refused_body)
            response.headers = Headers({"Content-Type": "application/json"})
            return response
        return None
