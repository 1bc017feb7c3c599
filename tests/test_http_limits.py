"""HTTP against hostile clients: half-sent requests are closed within the deadline, a flood
of them cannot keep a real request out (server/api/slow_clients.py); with keys, the
status routes tell an anonymous caller only up or down (server/api/health.py); and
X-Forwarded-For is believed only from the trusted proxies."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

import httpx
import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from server.settings import Settings
from testkit.server_process import ServerProcess

ATTACKER = "127.0.0.2"  # Linux routes all of 127.0.0.0/8 to loopback
KEY = "k-limits"
BOUND = 20.0  # what "within the deadline" means here: generous, for a loaded machine


def half_sent(port: int, data: bytes = b"GET /health HTTP/1.1\r\nHost: x\r\n") -> socket.socket:
    """A connection from the attacker's address that sends ``data`` and holds it."""
    sock = socket.socket()
    sock.bind((ATTACKER, 0))
    sock.settimeout(BOUND)
    sock.connect(("127.0.0.1", port))
    if data:
        sock.sendall(data)
    return sock


def answer(sock: socket.socket) -> tuple[bytes, float]:
    """What the server sent before it closed the connection, and when it closed it."""
    started, received = time.monotonic(), b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except (TimeoutError, ConnectionError):
        pass
    finally:
        sock.close()
    return received, time.monotonic() - started


def status_of(received: bytes) -> int | None:
    return int(received.split(b" ", 2)[1]) if received.startswith(b"HTTP/1.1 ") else None


@pytest.fixture(scope="module")
def guarded(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server(http_request_timeout="2", http_max_connections_per_address="8")


@pytest.mark.e2e
def test_half_sent_heads_and_bodies_are_answered_408_and_closed(guarded: ServerProcess) -> None:
    head = half_sent(guarded.port)
    body = half_sent(
        guarded.port,
        b"POST /start HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"a":',
    )
    idle = half_sent(guarded.port, b"")
    for sock in (head, body):
        received, took = answer(sock)
        assert took < BOUND and status_of(received) == 408, received
        assert b'"error": "the request was not received within 2 s"' in received
    received, took = answer(idle)
    assert took < BOUND and received == b"", "an idle connection is closed, unanswered"


@pytest.mark.e2e
def test_a_flood_from_one_address_is_capped_and_a_real_request_still_answered(
    guarded: ServerProcess,
) -> None:
    flood = [half_sent(guarded.port) for _ in range(20)]
    try:
        answered = httpx.get(f"{guarded.url}/health", timeout=5)
        assert answered.status_code == 200
        with httpx.Client(base_url=guarded.url, timeout=5) as keep_alive:
            assert [keep_alive.get("/health").status_code for _ in range(3)] == [200] * 3
        statuses = [status_of(answer(sock)[0]) for sock in flood]
    finally:
        for sock in flood:
            sock.close()
    assert statuses.count(429) == 12 and statuses.count(408) == 8, statuses
    assert "ERROR" not in guarded.log() and "Traceback" not in guarded.log()


@pytest.mark.e2e
def test_the_429_says_why(guarded: ServerProcess) -> None:
    held = [half_sent(guarded.port) for _ in range(8)]
    try:
        received, _ = answer(half_sent(guarded.port))
        assert status_of(received) == 429
        assert b'"error": "too many open connections from this address"' in received
    finally:
        for sock in held:
            sock.close()


@pytest.mark.e2e
def test_a_refused_client_reads_its_answer_whenever_its_request_arrives(
    guarded: ServerProcess,
) -> None:
    """The refusal goes out at connect, before the request: a close with that request
    arriving after it made the kernel reset the connection, and a client whose reads
    came after the reset lost the answer (RFC 9112 9.6: close lingering)."""
    held = [half_sent(guarded.port) for _ in range(8)]
    try:
        statuses = [asyncio.run(refused_answer(guarded.port)) for _ in range(20)]
    finally:
        for sock in held:
            sock.close()
    assert statuses == [429] * 20, statuses


async def refused_answer(port: int) -> int | None:
    """An asyncio client that sends its request at once and reads the answer later."""
    sock = socket.socket()
    sock.bind((ATTACKER, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.sleep(0.05)  # answer, end and any reset all in before the first read
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        await reader.read(65536)
    except ConnectionError:
        return None
    finally:
        writer.transport.abort()
    return status_of(head)


@pytest.mark.e2e
def test_past_the_total_cap_a_real_request_replaces_the_oldest_slow_one(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server(http_request_timeout="30", http_max_connections="10")
    flood = [half_sent(server.port) for _ in range(10)]
    try:
        time.sleep(0.3)
        assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200
        received, took = answer(flood[0])  # the oldest made room, long before its deadline
        assert status_of(received) == 503 and took < 15, received
        assert b"too many open connections" in received
    finally:
        for sock in flood:
            sock.close()


@pytest.mark.e2e
def test_a_complete_request_in_pieces_within_the_deadline_is_served(
    guarded: ServerProcess,
) -> None:
    sock = half_sent(guarded.port, b"GET /health HTTP/1.1\r\n")
    time.sleep(0.5)
    sock.sendall(b"Host: localhost\r\nConnection: close\r\n\r\n")
    received, _ = answer(sock)
    assert status_of(received) == 200, received


# -- the status routes with keys ----------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server(api_keys=KEY)


@pytest.mark.e2e
def test_with_keys_an_anonymous_health_says_only_status_and_version(keyed: ServerProcess) -> None:
    anonymous = httpx.get(f"{keyed.url}/health", timeout=5)
    assert anonymous.status_code == 200
    assert set(anonymous.json()) == {"status", "version"}, anonymous.json()
    full = httpx.get(f"{keyed.url}/health", headers={"Authorization": f"Bearer {KEY}"})
    assert {"storage", "models", "sessions_active", "process"} <= set(full.json())
    wrong = httpx.get(f"{keyed.url}/health", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"] == "the API key is not valid"


@pytest.mark.e2e
def test_with_keys_an_anonymous_ready_says_only_ready(keyed: ServerProcess) -> None:
    anonymous = httpx.get(f"{keyed.url}/ready", timeout=5)
    assert anonymous.status_code == 200 and anonymous.json() == {"status": "ready"}
    full = httpx.get(f"{keyed.url}/ready", headers={"Authorization": f"Bearer {KEY}"})
    assert "checks" in full.json()


# -- forwarded addresses --------------------------------------------------------------------


def _starts(server: ServerProcess, forwarded: list[str]) -> list[int]:
    return [
        httpx.post(f"{server.url}/start", json={}, headers={"X-Forwarded-For": a}).status_code
        for a in forwarded
    ]


@pytest.mark.e2e
def test_forwarded_addresses_are_not_believed_by_default(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server(session_rate_per_minute="1", session_burst="1")
    assert _starts(server, ["203.0.113.1", "203.0.113.2"]) == [200, 429]


@pytest.mark.e2e
def test_forwarded_addresses_are_believed_from_a_trusted_proxy(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server(
        session_rate_per_minute="1", session_burst="1", trusted_proxies="127.0.0.0/8"
    )
    assert _starts(server, ["203.0.113.1", "203.0.113.2", "203.0.113.2"]) == [200, 200, 429]


def test_trusted_proxies_must_be_addresses_or_networks() -> None:
    assert Settings(trusted_proxies="10.0.0.5, 10.1.0.0/16").trusted_proxies == [
        "10.0.0.5", "10.1.0.0/16",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="not an address or a network"):
        Settings(trusted_proxies="haproxy.local")


def test_uvicorns_protocol_still_has_the_hooks_the_deadline_uses() -> None:
    """server/api/slow_clients.py overrides these httptools-protocol callbacks: if uvicorn
    renames one, the deadline would silently stop being armed or disarmed."""
    for hook in ("connection_made", "connection_lost", "data_received", "on_message_complete",
                 "on_response_complete"):  # fmt: skip
        assert callable(getattr(HttpToolsProtocol, hook, None)), hook
    assert "read_paused" in FlowControl.__init__.__code__.co_names
