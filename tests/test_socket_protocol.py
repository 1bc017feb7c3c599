"""Upgraded WebSockets, bounded (server/api/socket_protocol.py), against a real server: a
client that pings and never reads is aborted past the unsent bound; one that stops reading
cannot hold a closed socket open past the close deadline; upgraded sockets stay in their
address's connection count; and the call of a client that behaves goes on meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable

import httpx
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from server.api.uvicorn_options import uvicorn_options
from server.settings import Settings
from testkit.raw_websocket import PING, TEXT, RawWebSocket, frame
from testkit.server_process import ServerProcess, free_port

pytestmark = pytest.mark.e2e

KEY = "k-1"
PUBLIC = "https://agent.example.com"


@pytest.fixture(scope="module")
def locked(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """Keys and a Twilio token: a stream with neither waits for its start, then is refused."""
    return start_server(
        api_keys=json.dumps([KEY]), public_url=PUBLIC, twilio_auth_token="twilio-token",
        telephony_start_seconds="1", ws_close_seconds="1", ws_max_unsent_bytes="65536",
        http_max_connections_per_address="6",
    )  # fmt: skip


async def ping_flood(sock: RawWebSocket, seconds: float, per_second: float | None = None) -> None:
    """125-byte pings for ``seconds`` (at most ``per_second`` of them), until the server
    ends the connection."""
    burst = frame(PING, b"p" * 125) * 64
    sent, start = 0, time.monotonic()
    with contextlib.suppress(OSError, TimeoutError):
        while time.monotonic() - start < seconds:
            await asyncio.wait_for(sock.send(burst), 1.0)
            sent += 64
            if per_second is not None:
                await asyncio.sleep(max(0.0, start + sent / per_second - time.monotonic()))


async def open_socket(
    server: ServerProcess, path: str = "/telephony/ws", receive_buffer: int | None = 4096
) -> RawWebSocket:
    sock = RawWebSocket()
    assert await sock.open("127.0.0.1", server.port, path, receive_buffer=receive_buffer) == 101
    return sock


@pytest.mark.timeout(60)
async def test_a_caller_that_pings_and_never_reads_is_ended(locked: ServerProcess) -> None:
    """An admitted call (no deadline of its own): the ping budget ends it, well before its
    pongs could pile up; on uvicorn's own protocol it is never ended."""
    sock = await open_socket(locked, f"/ws?api_key={KEY}")
    started = time.monotonic()
    await asyncio.wait_for(ping_flood(sock, 20.0), 25.0)  # until the server cuts it
    assert time.monotonic() - started < 10.0, "the server let the pongs pile up"
    sock.abort()
    assert "too many pings, closed (1008)" in locked.log()
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{locked.url}/health")).status_code == 200


async def burst_then_close(scope: Scope, receive: Receive, send: Send) -> None:
    """An app that sends 5 MB as fast as the socket lets it (flow control holds it once the
    peer stops reading), then closes."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await receive()
    await send({"type": "websocket.accept"})
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(1.0):
            for _ in range(80):
                await send({"type": "websocket.send", "bytes": bytes(65536)})
    await send({"type": "websocket.close", "code": 1000})


@pytest.mark.timeout(60)
async def test_a_close_is_not_held_open_by_a_peer_that_does_not_read() -> None:
    """What the peer never took waits in the transport; uvicorn's graceful close would wait
    for it for ever (the socket and its buffer held). The protocol's own, in process, with
    an app that fills the socket: aborted at the close deadline."""
    settings = Settings(ws_close_seconds=1.0)
    port = free_port()
    config = uvicorn.Config(burst_then_close, host="127.0.0.1", port=port, log_level="warning",
                            **uvicorn_options(settings))  # fmt: skip
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    try:
        sock = RawWebSocket()
        assert await sock.open("127.0.0.1", port, "/", receive_buffer=4096) == 101
        start = time.monotonic()
        while server.server_state.connections and time.monotonic() - start < 8.0:
            await asyncio.sleep(0.05)
        held = time.monotonic() - start
        sock.abort()
        assert not server.server_state.connections, "the close waited on the peer"
        assert held < 4.0  # the app's second of sending, then the 1 s deadline
    finally:
        server.should_exit = True
        await serving


@pytest.mark.timeout(60)
async def test_upgraded_sockets_count_toward_the_connections_of_their_address(
    locked: ServerProcess,
) -> None:
    held = [await open_socket(locked, receive_buffer=None) for _ in range(6)]
    try:
        refused = RawWebSocket()
        assert await refused.open("127.0.0.1", locked.port, "/telephony/ws") == 429
        assert "too many open connections from this address" in refused.response.decode()
        refused.abort()
        transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with httpx.AsyncClient(transport=transport) as other:  # another address
            assert (await other.get(f"{locked.url}/health")).status_code == 200
    finally:
        for sock in held:
            sock.abort()
    await asyncio.sleep(0.3)  # the server sees the resets and uncounts them
    again = RawWebSocket()
    assert await again.open("127.0.0.1", locked.port, "/telephony/ws") == 101
    again.abort()


@pytest.mark.timeout(60)
async def test_a_missing_or_wrong_key_is_refused_before_the_upgrade(locked: ServerProcess) -> None:
    for path, error in (("/ws", "an API key is required"), ("/ws?api_key=nope", "not valid"),
                        ("/telephony/ws?api_key=nope", "not valid"),
                        ("/telephony/ws?token=a.1.b", "stream token malformed")):  # fmt: skip
        sock = RawWebSocket()
        assert await sock.open("127.0.0.1", locked.port, path) == 401, path
        head, _, body = sock.response.partition(b"\r\n\r\n")
        assert b"content-type: application/json" in head.lower()
        assert error in json.loads(body)["error"], path
        sock.abort()


@pytest.mark.timeout(60)
async def test_a_client_that_floods_pings_or_messages_and_reads_is_closed(
    locked: ServerProcess,
) -> None:
    """Reading keeps it under the unsent bound; what it sends still costs a parse each."""
    for what, burst in (("too many pings", frame(PING, b"p") * 100),
                        ("too many messages", frame(TEXT, b"") * 2000)):  # fmt: skip
        sock = await open_socket(locked, f"/ws?api_key={KEY}", receive_buffer=None)
        closing = asyncio.create_task(sock.close_frame(10.0))
        with contextlib.suppress(OSError):
            for _ in range(20):
                await sock.send(burst)
                await asyncio.sleep(0.05)
        close = await closing
        sock.abort()
        assert close is not None and close[0] == 1008 and what in close[1], close
