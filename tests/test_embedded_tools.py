"""Tools with no API key: the default embedded LLM (Qwen2.5-Coder-1.5B, run in-process)
calls an agent's tool and the built-in clock, its answers use the results, and no JSON is
ever spoken. A real server (subprocess) on the embedded models, the aiortc test client,
typed turns (the words are not what is tested here: tests/test_local_stt.py is).

Slow by nature (the 1.1 GB model loads and reads the prompt at start), so one server and
two turns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e

AGENT = Path(__file__).parent / "agent_files" / "weather_desk.py"


@pytest.fixture(scope="module")
def qwen_server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    server = start_server(
        agent=str(AGENT),
        embedded_llm="qwen2.5-1.5b",
        preload_models="true",
        llm_max_tokens="60",
    )
    server.wait_models_ready(within=600)
    return server


def calls(client: RTCTestClient) -> list[dict[str, Any]]:
    return [m["data"] for m in client.messages if m.get("type") == "llm-function-call-in-progress"]


def spoken(client: RTCTestClient, since: int) -> str:
    return " ".join(
        m["data"]["text"]
        for m in client.messages[since:]
        if m.get("type") == "bot-output" and m["data"].get("spoken")
    )


async def ask(client: RTCTestClient, text: str) -> int:
    """Send a typed turn; returns where its messages start. Waits until the bot has
    spoken and stayed quiet for 2 s (a tool call's answer comes after the call)."""
    since = len(client.messages)
    client.send_rtvi("send-text", {"content": text})
    deadline = time.monotonic() + 120
    quiet_since: float | None = None
    while quiet_since is None or time.monotonic() - quiet_since < 2.0:
        assert time.monotonic() < deadline, f"{text}: {' '.join(client.types()[since:])}"
        types = client.types()[since:]
        starts = {"bot-llm-started", "bot-started-speaking", "llm-function-call-started"}
        done = "bot-stopped-speaking" in types
        if done:  # and nothing started after the last stop
            last = len(types) - types[::-1].index("bot-stopped-speaking")
            done = not set(types[last:]) & starts
        quiet_since = (quiet_since or time.monotonic()) if done else None
        await asyncio.sleep(0.1)
    return since


def test_the_start_reads_the_first_prompt_and_uses_qwen(qwen_server: ServerProcess) -> None:
    health = httpx.get(f"{qwen_server.url}/health", timeout=5).json()["models"]
    llm = health["embedded"]["llm"]
    assert llm["model"].startswith("Qwen2.5-Coder-1.5B"), llm
    assert "fallback" not in llm or not llm["fallback"], llm
    # Ready only after the system prompt and tools were read into every slot (2).
    assert health["ready"] and llm["pool"]["completed"] >= 2, llm


async def test_the_agent_tool_and_the_clock_are_called_offline(
    qwen_server: ServerProcess,
) -> None:
    async with RTCTestClient(qwen_server.url) as client:
        since = await ask(client, "What's the weather like in Paris today?")
        assert any(c.get("function_name") == "get_weather" for c in calls(client))
        answer = spoken(client, since)
        assert "sunny" in answer.lower() or "21" in answer, answer
        since = await ask(client, "What time is it right now?")
        clock = [c for c in calls(client) if c.get("function_name") == "get_current_time"]
        assert clock, (calls(client), spoken(client, since))
        everything = spoken(client, 0)
        assert "{" not in everything and "```" not in everything, everything
