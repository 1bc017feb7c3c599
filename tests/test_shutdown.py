"""Graceful shutdown of a real server process on SIGTERM, with aiortc clients connected."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import uvicorn

from server.session.registry import SessionRegistry
from server.session.shutdown import Drain, GracefulServer
from server.settings import Settings
from testkit.exposition import parse
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

# Generous bounds on "in time": the point is that the process does not hang.
EXIT_MARGIN = 5.0


def is_shutdown(message: dict[str, Any]) -> bool:
    return message.get("type") == "server-message" and (
        message.get("data", {}).get("type") == "server-shutdown"
    )


async def wait_exit(server: ServerProcess, within: float) -> int:
    return await asyncio.to_thread(server.proc.wait, within)


@pytest.mark.e2e
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
            metrics = parse((await http.get("/metrics")).text)
            assert metrics.value("parley_draining") == 1
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


@pytest.mark.e2e
async def test_the_drain_waits_for_the_last_client_only(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server(shutdown_grace_seconds="60")
    staying, leaving = RTCTestClient(server.url), RTCTestClient(server.url)
    try:
        for client in (staying, leaving):
            await client.connect()
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        for client in (staying, leaving):
            await client.wait_for(is_shutdown, within=5)
        await leaving.close()  # as a client that finishes its call would
        await asyncio.sleep(0.5)
        assert server.proc.poll() is None, "one call is still running"
        await staying.close()
        code = await wait_exit(server, 20)
        took = time.monotonic() - sent
        print(f"exited {took:.2f} s after SIGTERM, the clients having left")
        assert code in (0, -signal.SIGTERM)
        assert took < 20, "did not wait for the 60 s grace period"
        assert "closing: server shutdown" not in server.log(), "the clients hung up themselves"
    finally:
        for client in (staying, leaving):
            await client.close()


async def test_a_second_signal_skips_the_grace_period() -> None:
    settings = Settings(preload_models=False, stt="openai", llm="openai", tts="openai")
    app = SimpleNamespace(state=SimpleNamespace())
    registry = SessionRegistry(settings, services=None, handlers={})  # type: ignore[arg-type]
    app.state.drain = drain = Drain(registry, grace_seconds=60)
    server = GracefulServer(uvicorn.Config(app), app)
    server._loop = asyncio.get_running_loop()
    server.handle_exit(signal.SIGTERM, None)
    assert not server.should_exit, "the first signal drains"
    server.handle_exit(signal.SIGTERM, None)
    assert server.should_exit, "the second one stops the server now"
    await asyncio.wait_for(drain.done.wait(), 5)
    assert registry.draining, "the first signal was honoured"
