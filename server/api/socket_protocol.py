"""Upgraded WebSockets, bounded: what may wait toward a peer that does not read, how long a
close may take, and the per-address count they stay in.

uvicorn's WebSocket protocol (websockets' sans-I/O one, its default) writes control frames
straight into the transport with no flow control: each ping is answered with a pong, also
after the server has sent its close, so a client that pings and never reads grows the
server by the size of its pings (measured: 60-75 MB a socket in 15 s). Its graceful close
then waits for the buffer to drain, so that client keeps the memory and the descriptor
as long as it likes; and an upgraded socket left the HTTP connection count, so one
address could hold any number of them.

:class:`BoundedWebSocketProtocol` (one subclass per server, :func:`websocket_protocol`;
passed as ``uvicorn.Config(ws=...)``) adds:

- **unsent bytes**: past ``PARLEY_WS_MAX_UNSENT_BYTES`` waiting in the transport (pongs,
  closes, the app's messages; the app's own writes wait for the buffer to drain, so only
  a peer that does not read gets there) the connection is aborted, counted and logged;
- **the close deadline**: once the server closes (its close frame sent, or the app done),
  a peer has ``PARLEY_WS_CLOSE_SECONDS`` to finish, and may send ``AFTER_CLOSE`` bytes
  meanwhile (its close among them); past either the connection is aborted, its unsent
  bytes dropped. A close the app asks for while the peer is not reading is not held up
  by it either;
- **what waits for the app**: what arrives is parsed a few KB at a time, and no more
  while ``MAX_QUEUED`` messages wait for the app (uvicorn parses a whole read at once: 256
  KB of empty frames was 40,000 messages queued);
- **pings**: ``PINGS_PER_SECOND`` on average (``PING_BURST`` at once; browsers send none,
  libraries one in 20 s); past it the connection is failed with 1008: each one costs a
  parse and a pong, and a flood of them that is read is a core's worth of CPU;
- **the count**: an upgraded socket stays in its address's HTTP connection count
  (:class:`server.api.slow_clients.ConnectionBook`) until it is gone, except phone
  streams from ``PARLEY_TELEPHONY_TRUSTED_NETWORKS`` (a provider's few addresses carry
  every call).

Upstream (uvicorn) would need a bound on its control-frame writes and an abort at its
close timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, cast

from loguru import logger
from uvicorn._types import ASGISendEvent
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Request

from server.api.slow_clients import ConnectionBook, TrustedProxies
from server.guards.rate_limit import TokenBucket
from server.settings import Settings

PHONE_PATHS = ("/telephony/",)  # the routes a provider's streams arrive on
PIECE = 4096  # bytes parsed at a time: at most ~700 empty frames
MAX_QUEUED = 64  # messages waiting for the app before parsing stops (a 20 ms frame each)
PINGS_PER_SECOND, PING_BURST = 5.0, 20
AFTER_CLOSE = 65536  # bytes a peer may send once closed: its close, and what was in flight
POLICY = 1008


class AbortingTransport:
    """A transport whose ``close()`` turns into an abort when the peer has not taken what
    is left within ``seconds``: uvicorn closes gracefully, which waits for ever on a peer
    that does not read."""

    def __init__(self, transport: asyncio.Transport, seconds: float) -> None:
        self._transport = transport
        self._seconds = seconds
        self._deadline: asyncio.TimerHandle | None = None

    def close(self) -> None:
        if self._deadline is None and not self._transport.is_closing():
            loop = asyncio.get_running_loop()
            self._deadline = loop.call_later(self._seconds, self._transport.abort)
        self._transport.close()

    def lost(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class SocketBook:
    """What a server's WebSockets share: the HTTP connection book, the bounds, and counts."""

    def __init__(self, settings: Settings, connections: ConnectionBook) -> None:
        self.connections = connections
        self.max_unsent = settings.ws_max_unsent_bytes
        self.close_seconds = settings.ws_close_seconds
        self.phone_networks = TrustedProxies(settings.telephony_trusted_networks)
        self.aborted_unsent = 0  # peers that stopped reading
        self.aborted_closing = 0  # peers that did not finish a close in time


class BoundedWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol with the bounds of the module's docstring."""

    book: ClassVar[SocketBook]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.close_timeout = self.book.close_seconds  # uvicorn's own wait for the peer's close
        self._address = ""
        self._counted = False
        self._held = bytearray()  # received, not yet parsed: the app is behind
        self._after_close = 0  # bytes received since the close was sent
        self._pings = TokenBucket(PINGS_PER_SECOND, PING_BURST)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        wrapped = AbortingTransport(cast(asyncio.Transport, transport), self.book.close_seconds)
        super().connection_made(cast(asyncio.Transport, wrapped))
        # Handed over by the HTTP connection this socket was upgraded from (it uncounted
        # itself just before): still the same connection, so no cap is checked again.
        self._address = str(self.client[0]) if self.client else ""
        self.book.connections.hold(self._address)
        self._counted = True

    def connection_lost(self, exc: Exception | None) -> None:
        cast(AbortingTransport, self.transport).lost()
        self._uncount()
        super().connection_lost(exc)

    def handle_connect(self, event: Request) -> None:
        if event.path.startswith(PHONE_PATHS) and self._address in self.book.phone_networks:
            self._uncount()  # a provider's address: many calls, each its own session
        super().handle_connect(event)

    def data_received(self, data: bytes) -> None:
        if self.close_sent:
            self._after_close += len(data)
            if self._after_close > AFTER_CLOSE:  # it goes on sending as if not closed
                self.transport.abort()
                return
        self._held += data
        self._feed()

    async def receive(self) -> Any:
        message = await super().receive()
        if self._held and self.queue.qsize() < MAX_QUEUED // 2:
            self._feed()
        return message

    def handle_ping(self) -> None:
        if self.close_sent:
            return  # closing: what it sends now is not answered
        if self._pings.take() > 0.0:
            self._fail(POLICY, "too many pings")
            return
        super().handle_ping()

    def _feed(self) -> None:
        """Parse what is held, a piece at a time, while the app keeps up."""
        held = self._held
        failed = False
        while held and self.queue.qsize() < MAX_QUEUED and not (self.disconnected or failed):
            piece = bytes(held[:PIECE])
            del held[:PIECE]
            super().data_received(piece)
            failed = self.conn.parser_exc is not None  # closed already: the rest is void
        if self.disconnected or failed:
            held.clear()
        elif held and not self.read_paused:  # read no more until the app catches up
            self.read_paused = True
            self.transport.pause_reading()
        self._check_unsent()

    def _fail(self, code: int, reason: str) -> None:
        logger.info("WebSocket from {}: {}, closed ({})", self._address, reason, code)
        self.conn.fail(code, reason)
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self._held.clear()
        self.transport.close()

    async def send(self, message: ASGISendEvent) -> None:
        if message["type"] == "websocket.close" and not self.writable.is_set():
            # The peer is not reading: the close frame would wait behind what it has not
            # taken. Let it go out when it can, and end at the close deadline regardless.
            self.writable.set()
        await super().send(message)
        if self.close_sent and self.close_timer is not None:
            self.close_timer.cancel()  # uvicorn's timer closes gracefully: abort instead
            self.close_timer = self.loop.call_later(self.close_timeout, self._close_expired)
        self._check_unsent()

    def send_keepalive_ping(self) -> None:
        super().send_keepalive_ping()
        self._check_unsent()

    def _check_unsent(self) -> None:
        transport = self.transport
        if self.disconnected:
            return
        unsent = transport.get_write_buffer_size()
        if unsent > self.book.max_unsent:
            self.book.aborted_unsent += 1
            logger.info("WebSocket from {}: {} bytes unsent (the peer is not reading), "
                        "aborted", self._address, unsent)  # fmt: skip
            transport.abort()

    def _close_expired(self) -> None:
        self.close_timer = None
        if not self.disconnected:
            self.book.aborted_closing += 1
            self.transport.abort()

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self.book.connections.uncount(self._address)


def websocket_protocol(settings: Settings, connections: ConnectionBook) -> type[Any]:
    """The WebSocket protocol class for one server (``uvicorn.Config(ws=...)``), sharing
    ``connections`` (the HTTP protocol's book) for the per-address count."""
    book = SocketBook(settings, connections)
    return type("ParleyWebSocketProtocol", (BoundedWebSocketProtocol,), {"book": book})
