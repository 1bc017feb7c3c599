"""Whole WebRTC calls with the LLM at a vendor (``PARLEY_LLM=anthropic`` and ``google``): a
real server with the real VAD and turn-taking, an aiortc client that speaks a question, the
OpenAI-compatible stub as STT and TTS, and the vendor's fake (its own wire protocol on
127.0.0.1) as the LLM. The vendor answers with a tool call, then with words that are heard.
A vendor that refuses the key leaves the call talking, and /health says why."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.anthropic_stub import AnthropicStub, Reply, ToolUse
from testkit.gemini_stub import FunctionCall, GeminiReply, GeminiStub
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess
from testkit.speech import make_speech

pytestmark = pytest.mark.e2e

QUESTION = "What time is it?"
ANSWER = "It is noon on the dot."


@pytest.fixture(scope="module")
def models() -> Iterator[OpenAIStub]:
    with OpenAIStub() as stub:
        stub.config.transcript = QUESTION
        stub.config.tts_seconds_per_char = 0.06  # an answer of ~1.3 s, as spoken
        yield stub


@pytest.fixture(scope="module")
def claude() -> Iterator[AnthropicStub]:
    with AnthropicStub() as stub:
        yield stub


@pytest.fixture(scope="module")
def gemini() -> Iterator[GeminiStub]:
    with GeminiStub() as stub:
        yield stub


def settings(models: OpenAIStub, vendor: str, url: str, key: str) -> dict[str, str]:
    return models.server_settings(
        llm=vendor, **{f"{vendor}_url": url, f"{vendor}_api_key": key},
        greeting="", demo_tools="false", echo_cancellation="false",
        circuit_failure_threshold="1",
    )  # fmt: skip


async def spoken_turn(
    server: ServerProcess, wav: Path, until: str = "bot-stopped-speaking"
) -> RTCTestClient:
    """A client that asks the question aloud and waits for the message ``until`` (the
    whole answer heard, by default); the caller closes it."""
    client = RTCTestClient(server.url, jitter_frames=1)
    await client.connect()
    await asyncio.sleep(0.3)
    client.play(str(wav))
    await client.wait_for(lambda m: m.get("type") == until, within=30)
    await asyncio.sleep(0.3)
    return client


def bot_words(client: RTCTestClient) -> str:
    return " ".join(m["data"]["text"] for m in client.messages if m.get("type") == "bot-output")


@pytest.fixture(scope="module")
def question(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_speech(tmp_path_factory.mktemp("speech"), "question", QUESTION, 0.3, 1.0)


async def test_claude_hears_the_question_calls_a_tool_and_is_heard(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, claude: AnthropicStub,
    question: Path,
) -> None:  # fmt: skip
    server = start_server(**settings(models, "anthropic", claude.url, claude.api_key))
    claude.script(Reply("", (ToolUse("get_current_time", {}, id="toolu_time"),)), Reply(ANSWER))
    client = await spoken_turn(server, question)
    try:
        assert "noon" in bot_words(client)
        assert client.audio.loud_frames() > 20, "the answer was heard"
    finally:
        await client.close()
    first, second = claude.requests[-2:]
    assert first.body["messages"][-1]["content"][-1]["text"].startswith(QUESTION)
    assert "get_current_time" in [tool["name"] for tool in first.body["tools"]]
    results = [b for m in second.body["messages"] for b in m["content"]
               if isinstance(b, dict) and b.get("type") == "tool_result"]  # fmt: skip
    assert [r["tool_use_id"] for r in results] == ["toolu_time"]
    assert second.body["system"][-1]["cache_control"] == {"type": "ephemeral"}


async def test_gemini_hears_the_question_calls_a_tool_and_is_heard(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, gemini: GeminiStub,
    question: Path,
) -> None:  # fmt: skip
    server = start_server(**settings(models, "google", gemini.url, gemini.api_key))
    gemini.script(GeminiReply(calls=(FunctionCall("get_current_time", {}),)), GeminiReply(ANSWER))
    client = await spoken_turn(server, question)
    try:
        assert "noon" in bot_words(client)
        assert client.audio.loud_frames() > 20, "the answer was heard"
    finally:
        await client.close()
    first, second = gemini.requests()[-2:]
    assert QUESTION in str(first.body["contents"][-1])
    answered = [p for c in second.body["contents"] for p in c["parts"]
                if "functionResponse" in p or "function_response" in p]  # fmt: skip
    assert len(answered) == 1 and "get_current_time" in str(answered[0])


@pytest.mark.parametrize("vendor", ["anthropic", "google"])
async def test_a_refused_key_is_said_and_health_says_why_and_the_call_goes_on(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, claude: AnthropicStub,
    gemini: GeminiStub, question: Path, vendor: str,
) -> None:  # fmt: skip
    fake: Any = claude if vendor == "anthropic" else gemini
    server = start_server(**settings(models, vendor, fake.url, "not-the-key"))
    reason = "invalid x-api-key" if vendor == "anthropic" else "API key not valid"
    client = await spoken_turn(server, question, until="error")
    try:
        error = next(m for m in client.messages if m.get("type") == "error")
        assert reason in error["data"]["error"] and error["data"]["fatal"] is False
        client.send_rtvi("send-text", {"content": "Are you there?"})
        await client.wait_for(lambda _: client.types().count("error") >= 2, within=15)
        assert client.pc.connectionState == "connected", "the call goes on"
    finally:
        await client.close()
    async with httpx.AsyncClient() as http:
        health = (await http.get(f"{server.url}/health")).json()
    assert reason in health["circuits"]["llm"]["last_error"], health["circuits"]
    assert "not-the-key" not in str(health)


async def test_a_refused_llm_key_leaves_the_call_answered_by_the_fallback(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, claude: AnthropicStub,
    question: Path,
) -> None:  # fmt: skip
    fallback = {**settings(models, "anthropic", claude.url, "not-the-key"),
                "llm_fallback": '["openai"]'}  # fmt: skip
    server = start_server(**fallback)
    models.script_chat(ANSWER)
    client = await spoken_turn(server, question)
    try:
        assert "noon" in bot_words(client), "the fallback answered the question"
    finally:
        await client.close()
    async with httpx.AsyncClient() as http:
        status = (await http.get(f"{server.url}/health")).json()
    assert status["models"]["fallbacks"]["llm"]["serving"] == "openai", status
    assert "ANTHROPIC_API_KEY" in status["circuits"]["llm"]["last_error"]
