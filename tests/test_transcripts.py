"""Session records end to end: a real server (models at the OpenAI-compatible stub), a
real WebRTC client typing its turns (RTVI ``send-text``), and the records read over HTTP,
while live, after hang-up, after a SIGKILL and restart, after retention, and with none."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.storage.memory import MemoryTranscriptStore
from server.storage.sqlite import CRASHED, SQLiteTranscriptStore
from server.storage.sqlite_writer import MAX_QUEUE
from server.storage.store import TranscriptStore
from testkit.openai_stub import ChatReply, Fault, OpenAIStub, ToolCall
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ROOT, ServerProcess
from testkit.speech import make_speech

LONG_ANSWER = " ".join(["The lighthouse robot polished its lamp every single night."] * 12)


@pytest.fixture
def fresh_stub(stub: OpenAIStub) -> Iterator[OpenAIStub]:
    stub.reset()
    yield stub
    stub.reset()


@pytest.fixture(scope="module")
def start_stubbed(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub
) -> Callable[..., ServerProcess]:
    """A server whose three models are the stub: no model loads, answers are scripted."""

    def start(**settings: str) -> ServerProcess:
        return start_server(**stub.server_settings(**settings))

    return start


@pytest.fixture(scope="module")
def stubbed(start_stubbed: Callable[..., ServerProcess]) -> ServerProcess:
    return start_stubbed()


async def call(server: ServerProcess, method: str, path: str, **params: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        return await http.request(method, path, params=params)


async def get(server: ServerProcess, path: str, **params: Any) -> httpx.Response:
    return await call(server, "GET", path, **params)


async def transcript(server: ServerProcess, session_id: str) -> dict[str, Any]:
    response = await get(server, f"/api/sessions/{session_id}/transcript")
    assert response.status_code == 200, response.text
    return response.json()


async def history(server: ServerProcess, **params: Any) -> dict[str, Any]:
    response = await get(server, "/api/history", **params)
    assert response.status_code == 200, response.text
    return response.json()


async def wait_turns(server: ServerProcess, session_id: str, count: int, within: float = 10):
    """The transcript once it holds ``count`` turns (writes land a moment after events)."""
    deadline = time.monotonic() + within
    while True:
        record = await transcript(server, session_id)
        if len(record["turns"]) >= count:
            return record
        assert time.monotonic() < deadline, f"only {record['turns']}"
        await asyncio.sleep(0.05)


async def type_turn(client: RTCTestClient, text: str, audio: bool = False) -> None:
    """One typed user turn, answered (in text unless ``audio``) to its end."""
    done = sum(1 for m in client.messages if m.get("type") == "bot-llm-stopped")
    client.send_rtvi("send-text", {"content": text, "options": {"audio_response": audio}})
    deadline = time.monotonic() + 10
    while sum(1 for m in client.messages if m.get("type") == "bot-llm-stopped") <= done:
        assert time.monotonic() < deadline, client.types()[-10:]
        await asyncio.sleep(0.05)


@pytest.mark.e2e
async def test_turns_show_while_live_and_after_hang_up(
    stubbed: ServerProcess, fresh_stub: OpenAIStub
) -> None:
    fresh_stub.script_chat("Hello, human.", "Goodbye now.")
    async with httpx.AsyncClient(timeout=10) as http:
        started = (await http.post(f"{stubbed.url}/start", json={})).json()["sessionId"]
    client = RTCTestClient(stubbed.url)
    try:
        await client.connect(session_id=started)
        await type_turn(client, "Hi there.")
        live = await wait_turns(stubbed, client.pc_id, 2)
        assert live["live"] is True and live["ended_at"] is None
        assert [(t["role"], t["text"]) for t in live["turns"]] == [
            ("user", "Hi there."),
            ("assistant", "Hello, human."),
        ]
        assert live["client"]["library"] == "parley-tests"
        assert live["client"]["remote_addr"] == "127.0.0.1"
        assert live["session_id"] == started
        assert live["turns"][1]["metrics"]["usage"]["total_tokens"] > 0
        assert live["usage"]["usage"]["total_tokens"] > 0
        # The /start session id finds the same record.
        assert (await transcript(stubbed, started))["id"] == client.pc_id

        client.send_rtvi("no-such-message")  # an RTVI error, recorded
        await client.wait_for(lambda m: m.get("type") == "error-response")
        await type_turn(client, "Bye.")
        await wait_turns(stubbed, client.pc_id, 4)
    finally:
        await client.close()
    deleted = await call(stubbed, "DELETE", f"/api/sessions/{client.pc_id}")
    assert deleted.status_code in (200, 404)  # 404: it already noticed the hang-up
    ended = await transcript(stubbed, client.pc_id)
    assert ended["live"] is False and ended["ended_at"] is not None
    assert ended["close_reason"] in ("deleted", "peer connection closed", "liveness lost")
    assert [t["text"] for t in ended["turns"]] == [
        "Hi there.",
        "Hello, human.",
        "Bye.",
        "Goodbye now.",
    ]
    assert [e["type"] for e in ended["events"]] == ["rejected-messages"]
    assert ended["events"][0]["data"]["counts"] == {"unknown message type": 1}
    listed = await history(stubbed)
    mine = next(s for s in listed["sessions"] if s["id"] == client.pc_id)
    assert (mine["turn_count"], mine["live"]) == (4, False)
    assert listed["storage"] == "sqlite"


@pytest.mark.e2e
async def test_a_spoken_turn_is_recorded_with_its_metrics(
    stubbed: ServerProcess, fresh_stub: OpenAIStub, audio_dir: Path
) -> None:
    fresh_stub.script_stt("What a nice day.")
    fresh_stub.script_chat("It is lovely.")
    speech = make_speech(audio_dir, "nice-day", "What a nice day", before=0.3, after=1.5)
    async with RTCTestClient(stubbed.url, wav=str(speech)) as client:
        await client.wait_for(lambda m: m.get("type") == "bot-stopped-speaking", within=20)
        record = await wait_turns(stubbed, client.pc_id, 2)
    user, answer = record["turns"][:2]
    assert (user["role"], user["text"]) == ("user", "What a nice day.")
    assert (answer["role"], answer["text"], answer["interrupted"]) == (
        "assistant",
        "It is lovely.",
        False,
    )
    assert user["started_at"] < answer["started_at"] <= answer["at"].replace("Z", "+00:00")
    # The answer carries its voice-to-voice figures: STT, LLM and TTS.
    assert set(answer["metrics"]["ttfb"]) == {"stt", "llm", "tts"}
    assert answer["metrics"]["tts_characters"] == len("It is lovely.")


@pytest.mark.e2e
async def test_interruptions_tool_calls_and_errors_are_recorded(
    stubbed: ServerProcess, fresh_stub: OpenAIStub
) -> None:
    fresh_stub.script_chat(
        ChatReply("", (ToolCall("get_current_time", {"timezone": "UTC"}),)),
        LONG_ANSWER,
        Fault.http(500),
    )
    async with RTCTestClient(stubbed.url) as client:
        client.send_rtvi("send-text", {"content": "What time is it?"})
        await client.wait_for(lambda m: m.get("type") == "bot-tts-text", within=10)
        await asyncio.sleep(0.3)
        client.send_rtvi("send-text", {"content": "Stop, please."})  # barges in
        await client.wait_for(lambda m: m.get("type") == "bot-interrupted")
        await asyncio.sleep(0.2)
        client.send_rtvi("send-text", {"content": "Are you there?"})  # the LLM fails
        await client.wait_for(lambda m: m.get("type") == "error", within=10)
        record = await wait_turns(stubbed, client.pc_id, 4)
    turns = [(t["role"], t["text"], t["interrupted"]) for t in record["turns"]]
    assert turns[0] == ("user", "What time is it?", False)
    role, said, interrupted = turns[1]
    assert role == "assistant" and interrupted and 0 < len(said) < len(LONG_ANSWER)
    assert turns[2:] == [("user", "Stop, please.", False), ("user", "Are you there?", False)]
    events = {e["type"]: e["data"] for e in record["events"]}
    assert events["tool-call"]["function_name"] == "get_current_time"
    assert events["tool-call"]["arguments"] == {"timezone": "UTC"}
    assert "time" in str(events["tool-result"]["result"])
    assert "interruption" in events
    assert events["error"]["service"] == "llm"


@pytest.mark.e2e
async def test_unknown_ids_get_a_json_404(stubbed: ServerProcess) -> None:
    response = await get(stubbed, "/api/sessions/nobody/transcript")
    assert response.status_code == 404
    assert "nobody" in response.json()["error"]
    assert (await get(stubbed, "/api/history", limit=0)).status_code == 422
    storage = (await get(stubbed, "/health")).json()["storage"]
    assert storage["backend"] == "sqlite" and storage["ok"] is True


@pytest.mark.e2e
async def test_health_shows_the_write_queue_against_its_bound(stubbed: ServerProcess) -> None:
    storage = (await get(stubbed, "/health")).json()["storage"]
    queue = storage["queue"]
    assert queue["max"] == MAX_QUEUE
    assert 0 <= queue["depth"] <= queue["peak"] <= queue["max"]
    assert queue["waits"] == 0 and queue["wait_seconds"] == 0
    assert storage["pending_writes"] >= 0 and storage["commits"] >= 0


@pytest.mark.e2e
async def test_completed_turns_survive_a_sigkill(
    start_stubbed: Callable[..., ServerProcess], fresh_stub: OpenAIStub, tmp_path: Path
) -> None:
    fresh_stub.script_chat("First answer.", "Second answer.", "Third answer.")
    first = start_stubbed(data_dir=str(tmp_path))
    async with RTCTestClient(first.url) as client:
        await type_turn(client, "First question.")
        await type_turn(client, "Second question.")
        await wait_turns(first, client.pc_id, 4)
        first.proc.kill()  # mid-session: no shutdown, no close of the record
        await asyncio.to_thread(first.proc.wait)
    second = start_stubbed(data_dir=str(tmp_path))
    listed = (await history(second))["sessions"]
    assert [(s["id"], s["turn_count"], s["live"]) for s in listed] == [(client.pc_id, 4, False)]
    assert listed[0]["close_reason"] == CRASHED
    record = await transcript(second, client.pc_id)
    assert [t["text"] for t in record["turns"]] == [
        "First question.",
        "First answer.",
        "Second question.",
        "Second answer.",
    ]
    assert record["usage"]["usage"]["total_tokens"] > 0

    # A clean stop (SIGTERM) closes the live sessions' records before the store closes.
    async with RTCTestClient(second.url) as other:
        await type_turn(other, "Third question.")
        assert await asyncio.to_thread(second.stop) in (0, -15)
    third = start_stubbed(data_dir=str(tmp_path))
    record = await transcript(third, other.pc_id)
    assert record["close_reason"] == "server shutdown"
    assert [t["text"] for t in record["turns"]] == ["Third question.", "Third answer."]
    assert "left open by a crash" not in third.log()


@pytest.mark.e2e
async def test_retention_purges_old_records_at_start(
    start_stubbed: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    store = SQLiteTranscriptStore(tmp_path)
    await store.start()
    now, day = time.time(), 86400
    for name, started, ended in (
        ("old", now - 10 * day, now - 10 * day + 60),
        ("recent", now - day, now - day + 60),
        ("crashed-long-ago", now - 9 * day, None),  # closed at start-up, then purged
    ):
        store.open_session(name, None, {}, started)
        store.append_turn(name, "user", "hello", started + 1)
        if ended is not None:
            store.close_session(name, "deleted", ended)
    await store.close()
    server = start_stubbed(data_dir=str(tmp_path), transcript_retention_days="2")
    assert [s["id"] for s in (await history(server))["sessions"]] == ["recent"]
    assert (await get(server, "/api/sessions/old/transcript")).status_code == 404


@pytest.mark.e2e
async def test_paging_through_history(stubbed: ServerProcess) -> None:
    all_ids = [s["id"] for s in (await history(stubbed, limit=500))["sessions"]]
    assert len(all_ids) >= 2, "earlier tests left sessions"
    page = await history(stubbed, limit=1)
    paged = [s["id"] for s in page["sessions"]]
    while page["next_before"]:
        cursor = {"before": page["next_before"], "before_id": page["next_before_id"]}
        page = await history(stubbed, limit=1, **cursor)
        paged += [s["id"] for s in page["sessions"]]
    assert paged == all_ids


@pytest.mark.e2e
async def test_storage_none_keeps_live_sessions_only(
    start_stubbed: Callable[..., ServerProcess], fresh_stub: OpenAIStub, tmp_path: Path
) -> None:
    fresh_stub.script_chat("Nothing is written.")
    data_dir = tmp_path / "never-made"
    server = start_stubbed(storage="none", data_dir=str(data_dir))
    async with RTCTestClient(server.url) as client:
        await type_turn(client, "Remember this?")
        record = await wait_turns(server, client.pc_id, 2)
        assert record["turns"][1]["text"] == "Nothing is written."
        assert [s["id"] for s in (await history(server))["sessions"]] == [client.pc_id]
    await call(server, "DELETE", f"/api/sessions/{client.pc_id}")
    assert (await get(server, f"/api/sessions/{client.pc_id}/transcript")).status_code == 404
    assert await history(server) == {
        "sessions": [],
        "next_before": None,
        "next_before_id": None,
        "storage": "none",
    }
    assert (await get(server, "/health")).json()["storage"]["backend"] == "none"
    assert not data_dir.exists()


def run_server(**settings: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PARLEY_HOST": "127.0.0.1", "PARLEY_PORT": "0",
           "PARLEY_PRELOAD_MODELS": "false"}  # fmt: skip
    env.update({f"PARLEY_{k.upper()}": v for k, v in settings.items()})
    return subprocess.run(
        [sys.executable, "-m", "server"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=30,
    )  # fmt: skip


@pytest.mark.e2e
def test_an_unwritable_data_dir_stops_the_server_with_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = run_server(data_dir=str(blocker / "data"))
    assert done.returncode != 0
    assert "cannot keep transcripts in" in done.stderr
    assert "PARLEY_DATA_DIR" in done.stderr


@pytest.mark.e2e
async def test_a_data_dir_in_use_by_another_server_is_refused(stubbed: ServerProcess) -> None:
    in_use = (await get(stubbed, "/health")).json()["storage"]["path"]
    done = await asyncio.to_thread(run_server, data_dir=str(Path(in_use).parent))
    assert done.returncode != 0
    assert "another Parley server uses" in done.stderr


@pytest.mark.parametrize("backend", ["sqlite", "memory"])
async def test_a_merged_turn_is_folded_into_events_and_nothing_is_lost(
    backend: str, tmp_path: Path
) -> None:
    store: TranscriptStore = (
        SQLiteTranscriptStore(tmp_path) if backend == "sqlite" else MemoryTranscriptStore()
    )
    await store.start()
    t0 = 1_700_000_000.0
    store.open_session("pc1", None, {}, t0)
    store.append_turn("pc1", "user", "Hi.", t0 + 1)
    store.append_turn("pc1", "assistant", "Hello!", t0 + 2)
    store.append_turn("pc1", "user", "I was wondering about the museum.", t0 + 3)
    store.append_event("pc1", "interruption", {}, t0 + 4)
    store.append_turn("pc1", "assistant", "Sure", t0 + 4, interrupted=True)
    store.fold_last_turn("pc1")
    store.append_turn("pc1", "user", "I was wondering about the museum. When does it open?", t0 + 6)
    record = await store.get("pc1")
    await store.close()
    assert record is not None
    assert [(t.role, t.text) for t in record.turns] == [
        ("user", "Hi."),
        ("assistant", "Hello!"),
        ("user", "I was wondering about the museum. When does it open?"),
    ]
    assert record.turn_count == 3
    merged = [e for e in record.events if e.type == "turn-merged"]
    assert [(e.data["role"], e.data["text"]) for e in merged] == [
        ("user", "I was wondering about the museum."),
        ("assistant", "Sure"),
    ]
    assert merged[1].data["interrupted"] is True
    seqs = [e.seq for e in record.events]
    assert seqs == sorted(seqs)
