"""Two Parley servers (replicas r1 and r2, models at the OpenAI-compatible stub) on one
real PostgreSQL: a WebRTC call on r1 read on r2, the database stopped in the middle of
the call and started again (the call goes on, /health and /ready say storage is failing,
nothing is lost), and each replica's history listing both replicas' calls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from testkit.openai_stub import OpenAIStub
from testkit.postgres_server import PostgresServer, postgres_or_skip
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def database() -> Iterator[PostgresServer]:
    """A cluster of this module's own: its test stops and restarts it."""
    server = postgres_or_skip()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="module")
def replicas(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub, database: PostgresServer
) -> dict[str, ServerProcess]:
    url = database.create_database("parley")
    return {
        rid: start_server(
            **stub.server_settings(storage="postgres", database_url=url, replica_id=rid)
        )
        for rid in ("r1", "r2")
    }


async def get(server: ServerProcess, path: str, **params: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        return await http.get(path, params=params)


async def transcript_with(server: ServerProcess, pc_id: str, turns: int) -> dict[str, Any]:
    """The transcript (read on ``server``) once it holds ``turns`` turns."""
    deadline = time.monotonic() + 30
    while True:
        response = await get(server, f"/api/sessions/{pc_id}/transcript")
        if response.status_code == 200 and len(response.json()["turns"]) >= turns:
            return response.json()
        assert time.monotonic() < deadline, response.text
        await asyncio.sleep(0.1)


async def storage(server: ServerProcess) -> dict[str, Any]:
    return (await get(server, "/health")).json()["storage"]


async def until_storage(server: ServerProcess, ok: bool, pending: int | None = None) -> None:
    deadline = time.monotonic() + 40
    while True:
        status = await storage(server)
        if status["ok"] is ok and (pending is None or status["pending_writes"] == pending):
            return
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.1)


async def type_turn(client: RTCTestClient, text: str) -> None:
    """One typed user turn, answered in text to its end."""
    done = sum(1 for m in client.messages if m.get("type") == "bot-llm-stopped")
    client.send_rtvi("send-text", {"content": text, "options": {"audio_response": False}})
    deadline = time.monotonic() + 15
    while sum(1 for m in client.messages if m.get("type") == "bot-llm-stopped") <= done:
        assert time.monotonic() < deadline, client.types()[-10:]
        await asyncio.sleep(0.05)


async def test_an_outage_mid_call_loses_nothing_and_history_spans_replicas(
    replicas: dict[str, ServerProcess], stub: OpenAIStub, database: PostgresServer
) -> None:
    r1, r2 = replicas["r1"], replicas["r2"]
    stub.reset()
    stub.script_chat("First answer.", "Second answer.", "Third answer.", "On r2.")
    client = RTCTestClient(r1.url)
    try:
        await client.connect()
        assert client.pc_id.startswith("r1.")
        await type_turn(client, "Hello.")
        await transcript_with(r2, client.pc_id, 2)  # written by r1, read on r2

        database.stop()
        await type_turn(client, "Are you still there?")  # the call goes on
        await until_storage(r1, ok=False)
        failing = await storage(r1)
        assert failing["pending_writes"] > 0 and failing["last_error"]
        ready = await get(r1, "/ready")  # every replica shares the database: advisory
        assert ready.status_code == 200
        check = ready.json()["checks"]["storage"]
        assert check["ok"] is False and check["advisory"] is True
        assert "transcript storage failing" in check["detail"]
        unreachable = await get(r1, "/api/history")  # a read says so, and when to retry
        assert unreachable.status_code == 503 and unreachable.headers["Retry-After"] == "5"
        assert unreachable.json()["error"] == "transcript storage unavailable"
        await type_turn(client, "One more.")

        database.start()
        await until_storage(r1, ok=True, pending=0)
        assert (await storage(r1))["dropped_writes"] == 0
    finally:
        await client.close()
    record = await transcript_with(r2, client.pc_id, 6)
    assert [t["text"] for t in record["turns"]] == [
        "Hello.", "First answer.", "Are you still there?", "Second answer.", "One more.",
        "Third answer.",
    ]  # fmt: skip

    other = RTCTestClient(r2.url)
    try:
        await other.connect()
        await type_turn(other, "Hi r2.")
        await transcript_with(r2, other.pc_id, 2)
    finally:
        await other.close()
    for reader in (r1, r2):  # each replica pages through both replicas' calls
        seen: list[str] = []
        params: dict[str, Any] = {"limit": 1}
        while True:
            page = (await get(reader, "/api/history", **params)).json()
            assert page["storage"] == "postgres"
            seen += [s["id"] for s in page["sessions"]]
            if page["next_before"] is None:
                break
            params = {
                "limit": 1,
                "before": page["next_before"],
                "before_id": page["next_before_id"],
            }
        assert seen == [other.pc_id, client.pc_id]
