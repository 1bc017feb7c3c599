"""Sessions end to end: a real aiortc client connects, talks, hangs up, or vanishes."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from testkit.rtc_client import RTCTestClient
from testkit.server_process import ROOT, ServerProcess

pytestmark = pytest.mark.e2e


async def session_ids(server: ServerProcess) -> list[str]:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{server.url}/api/sessions")
    assert response.status_code == 200
    return [s["pc_id"] for s in response.json()["sessions"]]


async def wait_gone(server: ServerProcess, pc_id: str, within: float) -> float:
    """Seconds until ``pc_id`` leaves GET /api/sessions; fails after ``within``."""
    started = time.monotonic()
    while pc_id in await session_ids(server):
        assert time.monotonic() - started < within, f"{pc_id} still listed after {within} s"
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def test_connect_talk_and_hang_up_removes_the_session(
    server: ServerProcess, speech_wav: Path
) -> None:
    client = RTCTestClient(server.url, wav=str(speech_wav))
    try:
        connect_time = await client.connect()
        print(f"connect time (offer POST -> bot-ready): {connect_time * 1000:.0f} ms")
        ready = next(m for m in client.messages if m["type"] == "bot-ready")
        assert ready["data"]["version"] == "1.4.0"
        assert client.pc_id in await session_ids(server)
        # The server hears the speech: its VAD starts a user turn.
        await client.wait_for(lambda m: m.get("type") == "user-started-speaking", within=10)
        info = (await client.request("session-info"))["data"]["d"]
        assert info["client"]["library"] == "parley-tests"
        assert info["audio_frames_in"] > 20
        assert info["pings"] >= 1
        # Silence: 200 ms of frames, then DTX (a packet every 400 ms; tests/test_webrtc.py).
        assert client.audio.frames, "the server sends audio from the start"
    finally:
        await client.close()
    await wait_gone(server, client.pc_id, within=2.0)


async def test_disconnect_bot_closes_the_session(server: ServerProcess) -> None:
    async with RTCTestClient(server.url) as client:
        client.send_rtvi("disconnect-bot")
        await wait_gone(server, client.pc_id, within=2.0)
        left = await client.wait_for(lambda m: m.get("type") == "signalling")
        assert left["message"]["type"] == "peerLeft"


async def test_delete_hangs_up(server: ServerProcess) -> None:
    async with RTCTestClient(server.url) as client:
        async with httpx.AsyncClient() as http:
            response = await http.delete(f"{server.url}/api/sessions/{client.pc_id}")
            assert response.status_code == 200
            assert response.json() == {"pc_id": client.pc_id, "state": "closed"}
            assert client.pc_id not in await session_ids(server)
            again = await http.delete(f"{server.url}/api/sessions/{client.pc_id}")
            assert again.status_code == 404
            assert "unknown pc_id" in again.json()["error"]


async def test_silent_peer_is_reaped_after_liveness_timeout(server: ServerProcess) -> None:
    """A peer that stops pinging and sending media, without closing, is cleaned up."""
    async with RTCTestClient(server.url) as client:
        client.stop_pinging()
        client.mic.stop()  # no more media either; the connection itself stays up
        gone_after = await wait_gone(server, client.pc_id, within=3.0 + 3.0)
        assert gone_after > 1.0, "reaped while it was still alive"


async def test_killed_peer_process_is_reaped(server: ServerProcess) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "testkit.rtc_client", server.url,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        pc_id = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode().strip()
        assert pc_id in await session_ids(server)
        proc.send_signal(signal.SIGKILL)
        await wait_gone(server, pc_id, within=3.0 + 3.0)
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def test_full_server_answers_503_with_retry_after(start_server) -> None:
    small = start_server(max_sessions="2", retry_after="7")
    clients = [RTCTestClient(small.url) for _ in range(2)]
    extra = RTCTestClient(small.url)
    try:
        for client in clients:
            await client.connect()
        await extra.pc.setLocalDescription(await extra.pc.createOffer())
        async with httpx.AsyncClient() as http:
            response = await http.post(
                f"{small.url}/api/offer",
                json={"sdp": extra.pc.localDescription.sdp, "type": "offer"},
            )
        assert response.status_code == 503
        assert response.headers["retry-after"] == "7"
        assert "session slots" in response.json()["error"]
        # The two sessions in place are untouched.
        for client in clients:
            reply = await client.request("echo", {"still": "here"})
            assert reply["data"] == {"t": "echo", "d": {"still": "here"}}
    finally:
        for client in [*clients, extra]:
            await client.close()
