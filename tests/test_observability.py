"""Metrics, JSON logs and readiness of a real server (embedded TTS, the rest at the stub).

One call with a spoken turn (the stub transcribes it), a typed turn, a bad client
message and a failing LLM call; then /metrics must show each of them, and every log
line of the session must be JSON carrying its id.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from server.api.app import create_app
from server.ops.metrics import CONTENT_TYPE
from server.process.loop_lag import LoopLagMonitor
from server.settings import Settings
from testkit.exposition import Scrape, parse
from testkit.openai_stub import Fault, OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess


@pytest.fixture(scope="module")
def started(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub
) -> tuple[ServerProcess, httpx.Response]:
    """A server with JSON logs, the embedded TTS and the rest at the stub; and its first
    /ready answer, asked while the TTS loads in the background (seconds, not the few
    milliseconds since the first /health answer)."""
    server = start_server(
        **stub.server_settings(tts="local", preload_models="true", log_json="true")
    )
    return server, httpx.get(f"{server.url}/ready", timeout=10)


@pytest.fixture(scope="module")
def json_server(started: tuple[ServerProcess, httpx.Response]) -> ServerProcess:
    server = started[0]
    server.wait_models_ready(60)
    return server


async def scrape(server: ServerProcess) -> Scrape:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{server.url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE
    return parse(response.text)


def count(metrics: Scrape, name: str, **labels: str) -> float:
    return metrics.value(name, **labels) or 0.0


async def wait_count(client: RTCTestClient, type_: str, n: int, within: float) -> None:
    deadline = time.monotonic() + within
    while client.types().count(type_) < n:
        assert time.monotonic() < deadline, f"only {client.types()[-12:]}"
        await asyncio.sleep(0.05)


@pytest.mark.e2e
async def test_ready_is_503_until_the_models_are_loaded(
    started: tuple[ServerProcess, httpx.Response],
) -> None:
    server, first = started
    assert first.status_code == 503
    body = first.json()
    assert body["error"] == "not ready"
    assert body["detail"]["failing"] == ["models"]
    assert "tts" in body["detail"]["checks"]["models"]["detail"]
    await asyncio.to_thread(server.wait_models_ready, 60)
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{server.url}/health")).status_code == 200
        ready = await http.get(f"{server.url}/ready")
    assert ready.status_code == 200
    assert ready.json()["checks"]["models"] == {"ok": True, "detail": None}


@pytest.mark.e2e
async def test_a_call_moves_the_counters_and_logs_json_with_the_session_id(
    json_server: ServerProcess, stub: OpenAIStub, speech_wav: Path
) -> None:
    stub.reset()
    before = await scrape(json_server)
    assert count(before, "parley_sessions_active") == 0
    async with RTCTestClient(json_server.url, wav=str(speech_wav)) as client:
        await client.wait_for(lambda m: m.get("type") == "bot-stopped-speaking", within=20)
        client.send_rtvi("send-text", {"content": "And now a typed question."})
        await wait_count(client, "bot-stopped-speaking", 2, within=15)
        client.send_raw("{not json")
        await client.wait_for(lambda m: m.get("type") == "error", within=5)
        stub.script_chat(Fault.http(500))
        client.send_rtvi("send-text", {"content": "This one fails."})
        await client.wait_for(lambda m: "llm" in str(m.get("data", {}).get("error", "")), 10)
        during = await scrape(json_server)
        assert count(during, "parley_sessions_active") == 1
        assert count(during, "parley_peer_connections", state="connected") == 1
        async with httpx.AsyncClient() as http:
            gone = await http.delete(f"{json_server.url}/api/sessions/{client.pc_id}")
            assert gone.status_code == 200
            missing = await http.get(f"{json_server.url}/api/sessions/unknown")
            assert missing.status_code == 404
    after = await scrape(json_server)

    def moved(name: str, **labels: str) -> float:
        return count(after, name, **labels) - count(before, name, **labels)

    assert moved("parley_sessions_created_total") == 1
    assert moved("parley_sessions_closed_total", reason="deleted") == 1
    assert count(after, "parley_sessions_active") == 0
    assert moved("parley_user_turns_total") >= 2, "one spoken, one typed (and the failed one)"
    assert moved("parley_bot_turns_total", outcome="completed") >= 2
    assert moved("parley_voice_to_voice_seconds_count") == 1, "the spoken turn only"
    v2v = moved("parley_voice_to_voice_seconds_sum")
    assert 0 < v2v < 10, v2v
    for service in ("stt", "llm", "tts"):
        assert moved("parley_service_ttfb_seconds_count", service=service) >= 1, service
    assert moved("parley_errors_total", kind="rtvi") >= 1
    assert moved("parley_errors_total", kind="llm") == 1
    assert moved("parley_llm_tokens_total", direction="output") > 0
    assert moved("parley_http_responses_total", code="4xx") >= 1
    assert count(after, "parley_session_duration_seconds_count") >= 1
    # The event loop and the process.
    assert count(after, "parley_event_loop_lag_seconds_count") > 0
    assert "parley_event_loop_lag_max_seconds" in after.families
    assert count(after, "process_resident_memory_bytes") > 10_000_000
    assert count(after, "process_open_fds") > 0
    assert count(after, "parley_threads") >= 1
    assert count(after, "parley_asyncio_tasks") >= 1
    assert count(after, "parley_models_ready") == 1
    assert count(after, "parley_draining") == 0

    # Every line of the log is JSON; the session's lines carry its id.
    await asyncio.sleep(0.2)
    lines = [json.loads(line) for line in json_server.log().splitlines() if line.strip()]
    assert all({"time", "level", "message", "logger"} <= set(line) for line in lines)
    pc_id = client.pc_id
    assert pc_id is not None
    mine = [line for line in lines if line.get("session") == pc_id]
    named = [
        line for line in lines
        if pc_id in line["message"] and not line["logger"].startswith("uvicorn")
    ]  # fmt: skip
    assert named and all(line.get("session") == pc_id for line in named), named
    messages = " | ".join(line["message"] for line in mine)
    assert "rtvi: malformed JSON" in messages, "a data-channel callback logs with the id"
    assert "bot turn failed" in messages, "a bot-turn task logs with the id"
    assert "closing: deleted" in messages
    startup = next(line for line in lines if "ready on" in line["message"])
    assert "session" not in startup
    assert any(line["logger"].startswith("uvicorn") for line in lines), "uvicorn's lines too"


def _app_settings() -> Settings:
    return Settings(
        stt="openai", llm="openai", tts="openai", openai_base_url="http://127.0.0.1:9",
        preload_models=False, greeting="",
    )  # fmt: skip


def test_registered_checks_and_shutdown_hooks() -> None:
    """What another part registers: a readiness check, and a hook run at shutdown."""
    app = create_app(_app_settings())
    state: dict[str, Any] = {"writable": False, "flushed": None}

    def storage_writable() -> None:
        if not state["writable"]:
            raise OSError("read-only file system")

    async def slow_check() -> None:
        await asyncio.sleep(0)

    async def flush() -> None:
        state["flushed"] = len(app.state.registry)

    app.state.readiness.add("disk", storage_writable)  # "storage" is the app's own
    app.state.readiness.add("slow", slow_check)
    app.state.shutdown_hooks.append(flush)
    with TestClient(app) as http:
        response = http.get("/ready")
        assert response.status_code == 503
        detail = response.json()["detail"]
        assert detail["failing"] == ["disk"]
        assert detail["checks"]["disk"]["detail"] == "read-only file system"
        assert detail["checks"]["storage"]["ok"] is True
        assert detail["checks"]["slow"]["ok"] is True
        state["writable"] = True
        assert http.get("/ready").status_code == 200
        assert state["flushed"] is None
    assert state["flushed"] == 0, "the hook ran after every session had closed"


async def test_a_blocked_event_loop_shows_as_lag() -> None:
    samples: list[float] = []
    monitor = LoopLagMonitor(samples.append, interval=0.02, window=1.0)
    probe = asyncio.create_task(monitor.run())
    try:
        await asyncio.sleep(0.1)
        time.sleep(0.2)  # noqa: ASYNC251 - the blocking call under test
        await asyncio.sleep(0.1)
    finally:
        probe.cancel()
    assert monitor.samples == len(samples) >= 3
    assert monitor.recent_max >= 0.15, samples
    assert min(samples) < 0.15, "the lag is the overshoot, not the interval"
