"""The process as a whole: start-up checks and a clean shutdown on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from testkit.rtc_client import RTCTestClient
from testkit.server_process import ROOT, ServerProcess

pytestmark = pytest.mark.e2e


async def test_sigterm_closes_every_session_and_exits_cleanly(start_server) -> None:
    server: ServerProcess = start_server()
    clients = [RTCTestClient(server.url) for _ in range(2)]
    try:
        for client in clients:
            await client.connect()
        code = await asyncio.to_thread(server.stop)
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        assert code in (0, -15)
        for client in clients:
            left = await client.wait_for(lambda m: m.get("type") == "signalling", within=5)
            assert left["message"]["type"] == "peerLeft"
        log = server.log()
        assert log.count("closing: server shutdown") == 2
        assert "all sessions closed" in log
    finally:
        for client in clients:
            await client.close()


def test_invalid_settings_fail_with_a_clear_message() -> None:
    env = {**os.environ, "PARLEY_MAX_SESSIONS": "0", "PARLEY_PORT": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "server"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=30,
    )  # fmt: skip
    assert done.returncode == 1
    assert "invalid settings" in done.stderr
    assert "max_sessions" in done.stderr
