"""Whole WebRTC calls with a WebSocket voice (``PARLEY_TTS=cartesia``, ``elevenlabs``,
``deepgram``): a real server with the real VAD and turn-taking, an aiortc client that
speaks, Deepgram's fake as the live STT, the OpenAI-compatible stub as the LLM, and the
voice's fake (its own WebSocket protocol on 127.0.0.1) as the TTS. The question is heard,
answered with a tool call and spoken over one socket for the call, the answer's sentences
in one context; a barge-in cancels the context at the vendor and keeps only the words
the caller heard."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.anthropic_stub import AnthropicStub, Reply, ToolUse
from testkit.assemblyai_stub import AssemblyAIStub
from testkit.cartesia_stub import CartesiaStub
from testkit.deepgram_stub import DeepgramStub
from testkit.deepgram_tts_stub import DeepgramTTSStub
from testkit.elevenlabs_stub import ElevenLabsStub
from testkit.openai_stub import ChatReply, OpenAIStub, ToolCall
from testkit.openai_transcription_stub import OpenAITranscriptionStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess
from testkit.speech import make_speech

pytestmark = pytest.mark.e2e

QUESTION = "What time is it?"
ANSWER = "It is noon on the dot. The sun is high over the shop."
STORY = (
    "Once upon a time a small red bike lived in a shop by the sea. Every morning it "
    "watched the boats go out and come back. One day a girl came in and took it for a "
    "ride along the water. They rode until the sun went down and the lights came on."
)


@pytest.fixture(scope="module")
def models() -> Iterator[OpenAIStub]:
    with OpenAIStub() as stub:
        yield stub


@pytest.fixture(scope="module")
def deepgram() -> Iterator[DeepgramStub]:
    with DeepgramStub() as stub:
        stub.transcript = QUESTION
        yield stub


@pytest.fixture(scope="module")
def cartesia() -> Iterator[CartesiaStub]:
    with CartesiaStub() as stub:
        stub.first_audio_delay = 0.09
        yield stub


@pytest.fixture(scope="module")
def aura() -> Iterator[DeepgramTTSStub]:
    with DeepgramTTSStub() as stub:
        stub.first_audio_delay = 0.1
        yield stub


@pytest.fixture(scope="module")
def elevenlabs() -> Iterator[ElevenLabsStub]:
    with ElevenLabsStub() as stub:
        stub.first_audio_delay = 0.075
        yield stub


@pytest.fixture(scope="module")
def voices(
    cartesia: CartesiaStub, aura: DeepgramTTSStub, elevenlabs: ElevenLabsStub
) -> dict[str, Any]:
    return {"cartesia": cartesia, "deepgram": aura, "elevenlabs": elevenlabs}


@pytest.fixture(scope="module")
def assemblyai() -> Iterator[AssemblyAIStub]:
    with AssemblyAIStub() as stub:
        stub.transcript = QUESTION
        yield stub


@pytest.fixture(scope="module")
def question(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_speech(tmp_path_factory.mktemp("speech"), "question", QUESTION, 0.3, 1.0)


@pytest.fixture(scope="module")
def barge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("barge")
    return make_speech(folder, "barge", "Wait, stop. What time is it?", 0.0, 0.5)


def settings(models: OpenAIStub, ear: Any, voice: str, fake: Any) -> dict[str, str]:
    """The live STT ``ear`` (Deepgram's or AssemblyAI's fake), the voice ``fake``."""
    hearing = "deepgram" if isinstance(ear, DeepgramStub) else "assemblyai"
    return models.server_settings(
        stt=hearing, **{f"{hearing}_url": ear.url, f"{hearing}_api_key": ear.api_key},
        tts=voice, **{f"{voice}_url": fake.url, f"{voice}_api_key": fake.api_key},
        greeting="", demo_tools="true", echo_cancellation="false",
    )  # fmt: skip


async def ask(server: ServerProcess, question: Path) -> RTCTestClient:
    """A client that asked the question aloud and heard the whole answer (open)."""
    client = RTCTestClient(server.url, jitter_frames=1)
    await client.connect()
    await asyncio.sleep(0.3)
    client.play(str(question))
    await client.wait_for(lambda m: m.get("type") == "bot-stopped-speaking", within=30)
    return client


def bot_words(client: RTCTestClient) -> str:
    return " ".join(m["data"]["text"] for m in client.messages if m.get("type") == "bot-output")


@pytest.mark.parametrize("voice", ["cartesia", "elevenlabs", "deepgram"])
async def test_a_spoken_question_is_answered_in_the_vendors_voice(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, deepgram: DeepgramStub,
    assemblyai: AssemblyAIStub, voices: dict[str, Any], question: Path, voice: str,
) -> None:  # fmt: skip
    fake = voices[voice]
    ear = assemblyai if voice == "deepgram" else deepgram  # one PARLEY_DEEPGRAM_URL
    server = start_server(**settings(models, ear, voice, fake))
    models.script_chat(ChatReply(tool_calls=(ToolCall("get_current_time", {}),)), ANSWER)
    before = len(fake.sessions)
    client = await ask(server, question)
    try:
        assert "noon" in bot_words(client) and "shop" in bot_words(client)
        assert client.audio.loud_frames() > 50, "the answer was heard"
    finally:
        await client.close()
    assert len(fake.sessions[before:]) == 1, "one socket for the call"
    assert models.requests("/v1/audio/speech") == [], "no per-sentence HTTP TTS"


async def test_the_answer_is_spoken_over_one_socket_in_one_context(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, deepgram: DeepgramStub,
    cartesia: CartesiaStub, question: Path,
) -> None:  # fmt: skip
    server = start_server(**settings(models, deepgram, "cartesia", cartesia))
    models.script_chat(ChatReply(tool_calls=(ToolCall("get_current_time", {}),)), ANSWER)
    before = len(cartesia.sessions)
    client = await ask(server, question)
    await client.close()
    [session] = cartesia.sessions[before:]
    spoken = [r for r in session.requests if r.get("transcript", "").strip()]
    assert [r["transcript"].strip() for r in spoken] == [
        "It is noon on the dot.", "The sun is high over the shop."
    ]  # fmt: skip
    assert len({r["context_id"] for r in spoken}) == 1, "one context for the answer"
    assert models.requests("/v1/audio/speech") == [], "no per-sentence HTTP TTS"


@pytest.mark.parametrize("voice", ["cartesia", "deepgram"])
async def test_a_barge_in_cancels_the_context_and_keeps_the_words_heard(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, deepgram: DeepgramStub,
    assemblyai: AssemblyAIStub, voices: dict[str, Any], barge: Path, voice: str,
) -> None:  # fmt: skip
    fake = voices[voice]
    ear: Any = assemblyai if voice == "deepgram" else deepgram
    server = start_server(**settings(models, ear, voice, fake))
    models.script_chat(STORY)
    ear.transcript = "Wait, stop. What time is it?"
    fake.pace = 0.08  # about as fast as it plays: a sentence is still being made
    before = len(fake.sessions)
    try:
        async with RTCTestClient(server.url, jitter_frames=1) as client:
            client.send_rtvi("send-text", {"content": "Tell me a story.", "options": {}})
            await client.wait_for(lambda m: m.get("type") == "bot-started-speaking", within=20)
            await asyncio.sleep(1.5)
            client.play(str(barge))
            await client.wait_for(lambda m: m.get("type") == "bot-interrupted", within=10)
            await client.wait_for(  # the barge-in's own answer starts
                lambda m: m.get("type") == "bot-started-speaking"
                and client.types().count("bot-started-speaking") > 1, 20
            )  # fmt: skip
            pc_id = client.pc_id
    finally:
        fake.pace = 0.0
        ear.transcript = QUESTION
    [session] = fake.sessions[before:]
    if voice == "cartesia":
        story = [r["context_id"] for r in session.requests if "upon" in r.get("transcript", "")]
        assert session.cancels[:1] == story, "the cut answer's context was cancelled"
    else:
        assert session.clears >= 1, "the cut sentence was cleared at the vendor"
    async with httpx.AsyncClient() as http:
        record = (await http.get(f"{server.url}/api/sessions/{pc_id}/transcript")).json()
    said = [t for t in record["turns"] if t["role"] == "assistant"]
    assert said[0]["interrupted"] is True
    cut = said[0]["text"]
    assert cut and STORY.startswith(cut.rstrip(".…")) and len(cut) < len(STORY) / 2, cut


async def test_a_refused_voice_key_leaves_the_call_talking_on_the_fallback(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, deepgram: DeepgramStub,
    cartesia: CartesiaStub, question: Path,
) -> None:  # fmt: skip
    refused = {"cartesia_api_key": "not-the-key", "tts_fallback": '["openai"]',
               "circuit_failure_threshold": "1"}  # fmt: skip
    server = start_server(**{**settings(models, deepgram, "cartesia", cartesia), **refused})
    models.script_chat(ANSWER)
    speech = len(models.requests("/v1/audio/speech"))
    client = await ask(server, question)
    try:
        assert "noon" in bot_words(client)
        assert client.audio.loud_frames() > 10, "the answer was heard, in the fallback's voice"
    finally:
        await client.close()
    assert len(models.requests("/v1/audio/speech")) > speech
    async with httpx.AsyncClient() as http:
        status = (await http.get(f"{server.url}/health")).json()
        ready = await http.get(f"{server.url}/ready")
    assert status["models"]["fallbacks"]["tts"]["serving"] == "openai", status
    # Shown in /ready too, advisory: the key is the same on every replica, and the
    # fallback serves.
    assert ready.status_code == 200
    keys = ready.json()["checks"]["keys"]
    assert keys["ok"] is False and keys["advisory"] is True
    assert "tts:" in keys["detail"] and "CARTESIA_API_KEY" in keys["detail"]
    assert "CARTESIA_API_KEY" in status["circuits"]["tts"]["last_error"]
    assert "not-the-key" not in str(status)


async def test_a_voice_socket_that_drops_mid_call_is_reopened_and_the_call_goes_on(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, deepgram: DeepgramStub,
    cartesia: CartesiaStub, question: Path,
) -> None:  # fmt: skip
    server = start_server(**settings(models, deepgram, "cartesia", cartesia))
    models.script_chat(ANSWER, "Still here, and still noon.")
    before = len(cartesia.sessions)
    cartesia.drop_after(3)  # the answer's first sentence, mid-way
    client = await ask(server, question)
    try:
        await asyncio.sleep(0.5)
        client.play(str(question))  # asked again
        await client.wait_for(
            lambda m: m.get("type") == "bot-output" and "Still here" in m["data"]["text"], 30
        )
        await client.wait_for(lambda m: m.get("type") == "bot-stopped-speaking"
                              and client.types().count("bot-stopped-speaking") > 1, 30)  # fmt: skip
    finally:
        await client.close()
    assert len(cartesia.sessions[before:]) == 2, "the dropped socket was reopened once"


async def test_a_whole_vendor_stack_realtime_transcription_claude_and_cartesia(
    start_server: Callable[..., ServerProcess], cartesia: CartesiaStub, question: Path,
) -> None:  # fmt: skip
    """OpenAI's realtime transcription hears the question, Claude answers with a tool
    call, Cartesia speaks: no OpenAI-compatible model on the call's path at all."""
    with OpenAITranscriptionStub() as ear, AnthropicStub() as claude:
        ear.transcript = QUESTION
        claude.script(Reply(tool_calls=(ToolUse("get_current_time", {}),)), Reply(ANSWER))
        server = start_server(
            stt="openai-realtime", openai_base_url=ear.url, openai_api_key=ear.api_key,
            llm="anthropic", anthropic_url=claude.url, anthropic_api_key=claude.api_key,
            tts="cartesia", cartesia_url=cartesia.url, cartesia_api_key=cartesia.api_key,
            greeting="", demo_tools="true", echo_cancellation="false",
        )  # fmt: skip
        client = await ask(server, question)
        try:
            assert "noon" in bot_words(client)
            finals = [m["data"]["text"] for m in client.messages
                      if m.get("type") == "user-transcription"
                      and m["data"].get("final")]  # fmt: skip
            assert finals == [QUESTION]
            assert client.audio.loud_frames() > 50
        finally:
            await client.close()
        [session] = ear.sessions
        assert session.config["audio"]["input"]["turn_detection"] is None
        assert 1.0 < session.audio / 48000 < 6.0, "the utterance at 24 kHz, not the call"
        assert [r.body["tools"][0]["name"] for r in claude.requests][:1] == ["get_current_time"]
