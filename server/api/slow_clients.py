"""Slow and piled-up HTTP connections: a deadline on receiving each request, and caps on
the connections open, in all and per client address.

uvicorn times out only a connection idle between requests (``timeout_keep_alive``): one
that never finishes its request head, or dribbles its body, stays open for ever, and 200
of them held from one address cost nothing to keep (slowloris). Its ``limit_concurrency``
does not help: it counts those connections too, so a flood of them gets the legitimate
request refused (with a plain-text 503, at the head's end). An ASGI middleware cannot help
either: the app sees a request only once its head is complete.

So the bound sits in uvicorn's HTTP protocol (:func:`http_protocol` subclasses the
httptools one, pinned by ``uvicorn[standard]``; passed as ``uvicorn.Config(http=...)``):

- **deadline**: from the moment a connection opens, and again once an answer has gone
  out, the client has ``PARLEY_HTTP_REQUEST_TIMEOUT`` s to deliver a whole request (head
  and body). Past it, a partial request is answered 408 and the connection closed (an
  idle one just closed). Time the server spends answering, or with reading paused by
  its own flow control, does not count against the client.
- **per address**: at most ``PARLEY_HTTP_MAX_CONNECTIONS_PER_ADDRESS`` open connections
  from one peer address (trusted proxies, which carry many clients, excepted); more get
  429 and are closed at once.
- **in all**: at most ``PARLEY_HTTP_MAX_CONNECTIONS``; past it a new connection replaces
  the oldest one still waiting for (or receiving) a request, which is told 503; only when
  every connection is busy with an answer is the newcomer refused with 503. A complete
  request takes milliseconds, a slow one holds its place for at most the deadline: so a
  flood of slow requests, from however many addresses, cannot keep a real one out.

Upstream (uvicorn) would need a request-head timeout and a per-address connection limit.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections import OrderedDict
from typing import Any, ClassVar

from loguru import logger
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from server.settings import Settings

LINGER_SECONDS = 1.0  # how long a refused connection is read (and dropped) before its close
_REASONS = {408: "Request Timeout", 429: "Too Many Requests", 503: "Service Unavailable"}


def refusal(status: int, error: str, detail: object = None) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, in the app's error shape."""
    body = json.dumps({"error": error, "detail": detail}).encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class TrustedProxies:
    """The addresses whose connections carry many clients (``PARLEY_TRUSTED_PROXIES``)."""

    def __init__(self, entries: list[str]) -> None:
        self.everyone = "*" in entries
        self.networks = [ipaddress.ip_network(e, strict=False) for e in entries if e != "*"]

    def __contains__(self, address: str) -> bool:
        if self.everyone:
            return True
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.networks)


class ConnectionBook:
    """What the connections of one server share: who is waiting for a request (oldest
    first), and how many connections each address holds."""

    def __init__(self, settings: Settings) -> None:
        self.timeout = settings.http_request_timeout
        self.max_connections = settings.http_max_connections
        self.per_address = settings.http_max_connections_per_address
        self.proxies = TrustedProxies(settings.trusted_proxies)
        self.reading: OrderedDict[DeadlineProtocol, None] = OrderedDict()
        self.by_address: dict[str, int] = {}
        self.timed_out = 0
        self.refused = 0

    def count(self, address: str) -> bool:
        """Count a new connection from ``address``; False when it is one too many."""
        held = self.by_address.get(address, 0)
        if held >= self.per_address and address not in self.proxies:
            return False
        self.by_address[address] = held + 1
        return True

    def hold(self, address: str) -> None:
        """Count a connection handed over from another protocol (no cap: already counted)."""
        self.by_address[address] = self.by_address.get(address, 0) + 1

    def uncount(self, address: str) -> None:
        held = self.by_address.get(address, 0) - 1
        if held > 0:
            self.by_address[address] = held
        else:
            self.by_address.pop(address, None)

    def oldest_reader(self, besides: DeadlineProtocol) -> DeadlineProtocol | None:
        return next((p for p in self.reading if p is not besides), None)


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadline and the caps of the module's
    docstring; :func:`http_protocol` makes one subclass per server, with its book."""

    book: ClassVar[ConnectionBook]

    def connection_made(  # type: ignore[override]  # narrows BaseTransport, as uvicorn's does
        self, transport: asyncio.Transport
    ) -> None:
        super().connection_made(transport)
        self._timer: asyncio.TimerHandle | None = None
        self._lingering = False
        self._heard = False  # bytes of a request since the deadline was set
        self._address = str(self.client[0]) if self.client else ""
        self._counted = self.book.count(self._address)
        if not self._counted:
            limit = self.book.per_address
            self._refuse(429, "too many open connections from this address", {"limit": limit})
            return
        if len(self.connections) > self.book.max_connections and not self._make_room():
            limit = self.book.max_connections
            self._refuse(503, "the server has too many open connections", {"limit": limit})
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._counted:
            self._counted = False
            self.book.uncount(self._address)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:  # refused: what it still sends is read only to be dropped
            return
        self._heard = True
        super().data_received(data)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self.parser.should_upgrade() and self._should_upgrade():
            return  # a WebSocket: handle_websocket_upgrade hands the socket on
        if self.cycle.response_complete:  # answered before its body was in: next request
            self._arm()
        else:
            self._disarm()  # the whole request is in: the server's turn

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Waiting for the next request, unless a pipelined one (already read) was started.
        if not self.transport.is_closing() and self.cycle.response_complete:
            self._arm()

    def handle_websocket_upgrade(self) -> None:
        # The WebSocket protocol takes the socket over and this one never hears of it
        # again: the count goes to it (server/api/socket_protocol.py holds it until the
        # socket is gone).
        self._disarm()
        if self._counted:
            self._counted = False
            self.book.uncount(self._address)
        super().handle_websocket_upgrade()

    # -- the deadline -----------------------------------------------------------------

    def _arm(self) -> None:
        self._disarm()
        self._heard = False
        self._timer = self.loop.call_later(self.book.timeout, self._expired)
        self.book.reading[self] = None

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.book.reading.pop(self, None)

    def _expired(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self.flow is not None and self.flow.read_paused:  # we stopped reading, not it
            self._timer = self.loop.call_later(self.book.timeout, self._expired)
            return
        self.book.timed_out += 1
        seconds = f"{self.book.timeout:g} s"
        logger.debug("http: {}: no whole request within {}, closed", self._address, seconds)
        if self._heard:
            self._refuse(408, f"the request was not received within {seconds}")
        else:  # idle: nothing to answer
            self._disarm()
            self.transport.close()

    def _make_room(self) -> bool:
        """Close the oldest connection still waiting for its request; False when none."""
        victim = self.book.oldest_reader(besides=self)
        if victim is None:
            return False
        victim._refuse(503, "the server has too many open connections: this slow one closed")
        return True

    def _refuse(self, status: int, error: str, detail: Any = None) -> None:
        """Answer, then close lingering: a close with the client's request still unread
        (a refusal at connect comes before it) makes the kernel reset the connection, and
        a reset can discard the answer before the client reads it. So the answer goes out
        with a FIN, what the client still sends is dropped, and the socket closes at its
        EOF or after ``LINGER_SECONDS``, whichever comes first."""
        self._disarm()
        self.book.refused += 1
        if self.transport.is_closing() or self._lingering:
            return
        self.transport.write(refusal(status, error, detail))
        answering = self.cycle is not None and not self.cycle.response_complete
        if answering or not self.transport.can_write_eof():  # the app may still write
            self.transport.close()
            return
        self._lingering = True
        self.transport.write_eof()
        if self.flow is not None:
            self.flow.resume_reading()  # to hear its EOF, even if the parser had paused
        self._timer = self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def eof_received(self) -> None:
        if self._lingering:
            self.transport.close()
            return
        super().eof_received()


def http_protocol(settings: Settings, book: ConnectionBook | None = None) -> type[DeadlineProtocol]:
    """The HTTP protocol class for one server (``uvicorn.Config(http=...)``), with its
    :class:`ConnectionBook` (a new one unless given)."""
    book = book or ConnectionBook(settings)
    return type("ParleyHTTPProtocol", (DeadlineProtocol,), {"book": book})
