"""Whole WebRTC calls with a live STT vendor (``PARLEY_STT=deepgram``, ``assemblyai``): a
real server with the real VAD and turn-taking, an aiortc client that speaks, the vendor's
fake (its own WebSocket protocol on 127.0.0.1) as the STT, and the OpenAI-compatible stub as
LLM and TTS. The question is heard through the vendor's socket and answered with a tool
call; a socket that drops mid-call is reconnected; a refused key leaves the call talking on
the fallback STT, and /health says which one serves."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.assemblyai_stub import AssemblyAIStub
from testkit.deepgram_stub import DeepgramStub
from testkit.openai_stub import ChatReply, OpenAIStub, ToolCall
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess
from testkit.speech import make_speech

pytestmark = pytest.mark.e2e

QUESTION = "What time is it?"
ANSWER = "It is noon on the dot."


@pytest.fixture(scope="module")
def models() -> Iterator[OpenAIStub]:
    with OpenAIStub() as stub:
        stub.config.transcript = "the fallback heard this"
        stub.config.tts_seconds_per_char = 0.06
        yield stub


@pytest.fixture(scope="module")
def deepgram() -> Iterator[DeepgramStub]:
    with DeepgramStub() as stub:
        stub.transcript = QUESTION
        yield stub


@pytest.fixture(scope="module")
def assemblyai() -> Iterator[AssemblyAIStub]:
    with AssemblyAIStub() as stub:
        stub.transcript = QUESTION
        yield stub


@pytest.fixture(scope="module")
def question(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_speech(tmp_path_factory.mktemp("speech"), "question", QUESTION, 0.3, 1.0)


def settings(models: OpenAIStub, vendor: str, url: str, key: str, **more: str) -> dict[str, str]:
    return models.server_settings(
        stt=vendor, **{f"{vendor}_url": url, f"{vendor}_api_key": key},
        greeting="", demo_tools="true", echo_cancellation="false",
        circuit_failure_threshold="1", **more,
    )  # fmt: skip


async def ask(server: ServerProcess, wav: Path) -> RTCTestClient:
    """A client that asks the question aloud and has heard the whole answer."""
    client = RTCTestClient(server.url, jitter_frames=1)
    await client.connect()
    await asyncio.sleep(0.3)
    client.play(str(wav))
    await client.wait_for(lambda m: m.get("type") == "bot-stopped-speaking", within=30)
    await asyncio.sleep(0.3)
    return client


def heard(client: RTCTestClient) -> list[str]:
    """The user's final words, as the client was told them."""
    return [m["data"]["text"] for m in client.messages
            if m.get("type") == "user-transcription" and m["data"].get("final")]  # fmt: skip


def bot_words(client: RTCTestClient) -> str:
    return " ".join(m["data"]["text"] for m in client.messages if m.get("type") == "bot-output")


async def health(server: ServerProcess) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{server.url}/health")).json()


@pytest.mark.parametrize("vendor", ["deepgram", "assemblyai"])
async def test_the_question_is_heard_through_the_vendors_socket_and_answered(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, deepgram: DeepgramStub,
    assemblyai: AssemblyAIStub, question: Path, vendor: str,
) -> None:  # fmt: skip
    fake: Any = deepgram if vendor == "deepgram" else assemblyai
    server = start_server(**settings(models, vendor, fake.url, fake.api_key))
    models.script_chat(ChatReply(tool_calls=(ToolCall("get_current_time", {}),)), ANSWER)
    before = len(fake.sessions)
    client = await ask(server, question)
    try:
        assert heard(client) == [QUESTION]
        assert "noon" in bot_words(client)
        assert client.audio.loud_frames() > 20, "the answer was heard"
    finally:
        await client.close()
    session = fake.sessions[before]
    assert 1.0 < session.audio / 32000 < 6.0, "the utterance, not the whole call"
    assert models.requests("/v1/audio/transcriptions") == [], "no per-utterance STT"


async def test_a_dropped_socket_is_reconnected_and_the_words_still_come(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, deepgram: DeepgramStub,
    question: Path,
) -> None:  # fmt: skip
    server = start_server(**settings(models, "deepgram", deepgram.url, deepgram.api_key))
    models.script_chat(ANSWER)
    deepgram.drop_after(16000)  # half a second into the question
    client = await ask(server, question)
    try:
        assert heard(client) == [QUESTION], "the replayed audio's words, once"
        assert "noon" in bot_words(client)
    finally:
        await client.close()


async def test_a_refused_key_leaves_the_call_talking_on_the_fallback(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, deepgram: DeepgramStub,
    question: Path,
) -> None:  # fmt: skip
    server = start_server(**settings(models, "deepgram", deepgram.url, "not-the-key",
                                     stt_fallback='["openai"]'))  # fmt: skip
    models.script_chat(ANSWER)
    client = await ask(server, question)
    try:
        assert heard(client) == ["the fallback heard this"]
        assert "noon" in bot_words(client)
    finally:
        await client.close()
    status = await health(server)
    assert status["models"]["fallbacks"]["stt"]["serving"] == "openai", status
    assert "DEEPGRAM_API_KEY" in status["circuits"]["stt"]["last_error"]
    assert "not-the-key" not in str(status)
