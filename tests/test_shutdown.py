"""Graceful shutdown of a real server process on SIGTERM, with aiortc clients connected."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from typing import Any

import httpx

from tests.conftest import ServerProcess
from tests.rtc_client import RTCTestClient

# Generous bounds on "in time": the point is that the process does not hang.
EXIT_MARGIN = 5.0


def is_shutdown(message: dict[str, Any]) -> bool:
    return message.get("type") == "server-message" and (
        message.get("data", {}).get("type") == "server-shutdown"
    )


async def wait_exit(server: ServerProcess, within: float) -> int:
    return await asyncio.to_thread(server.proc.wait, within)


async def test_sigterm_drains_then_closes_the_sessions_left(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server(shutdown_grace_seconds="3", retry_after="9")
    client = RTCTestClient(server.url)
    newcomer = RTCTestClient(server.url)
    try:
        await client.connect()
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        notice = await client.wait_for(is_shutdown, within=5)
        assert notice["label"] == "rtvi-ai"
        assert notice["data"] == {"type": "server-shutdown", "grace_seconds": 3.0}

        # Draining: no new session, but the running one is served.
        await newcomer.pc.setLocalDescription(await newcomer.pc.createOffer())
        offer = {"sdp": newcomer.pc.localDescription.sdp, "type": "offer"}
        async with httpx.AsyncClient(base_url=server.url, timeout=5) as http:
            refused = await http.post("/api/offer", json=offer)
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "9"
            assert refused.json() == {"error": "the server is shutting down", "detail": None}
            start = await http.post("/start", json={})
            assert start.status_code == 503 and start.headers["retry-after"] == "9"
            health = (await http.get("/health")).json()
            assert health["status"] == "draining" and health["draining"] is True
            ready = await http.get("/ready")
            assert ready.status_code == 503
            assert "accepting" in ready.json()["detail"]["failing"]
            metrics = (await http.get("/metrics")).text
            assert "parley_draining 1" in metrics.splitlines()
        reply = await client.request("echo", {"still": "served"})
        assert reply["data"]["d"] == {"still": "served"}

        # The client stays: after the grace period the server hangs up and exits.
        code = await wait_exit(server, 3.0 + EXIT_MARGIN + 5)
        took = time.monotonic() - sent
        print(f"exited {took:.2f} s after SIGTERM (grace 3 s)")
        assert code in (0, -signal.SIGTERM)
        assert took >= 2.5, "the running session was given its grace period"
        assert took < 3.0 + EXIT_MARGIN
        left = await client.wait_for(lambda m: m.get("type") == "signalling", within=2)
        assert left["message"]["type"] == "peerLeft"
        log = server.log()
        assert "closing: server shutdown" in log
        assert "all sessions closed" in log
    finally:
        await newcomer.close()
        await client.close()


async def test_the_drain_ends_when_the_last_client_leaves(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server(shutdown_grace_seconds="60")
    clients = [RTCTestClient(server.url) for _ in range(2)]
    try:
        for client in clients:
            await client.connect()
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        for client in clients:
            await client.wait_for(is_shutdown, within=5)
            await client.close()  # as a client that finishes its call would
        code = await wait_exit(server, 20)
        took = time.monotonic() - sent
        print(f"exited {took:.2f} s after SIGTERM, the clients having left")
        assert code in (0, -signal.SIGTERM)
        assert took < 20, "did not wait for the 60 s grace period"
        assert "closing: server shutdown" not in server.log(), "the clients hung up themselves"
    finally:
        for client in clients:
            await client.close()


async def test_a_second_sigterm_skips_the_grace_period(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server(shutdown_grace_seconds="60")
    client = RTCTestClient(server.url)
    try:
        await client.connect()
        server.proc.send_signal(signal.SIGTERM)
        await client.wait_for(is_shutdown, within=5)
        server.proc.send_signal(signal.SIGTERM)
        code = await wait_exit(server, 20)
        assert code in (0, -signal.SIGTERM)
        left = await client.wait_for(lambda m: m.get("type") == "signalling", within=2)
        assert left["message"]["type"] == "peerLeft"
    finally:
        await client.close()
