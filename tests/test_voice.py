"""The whole voice loop over WebRTC: an aiortc client talks to a real server.

The first test runs the embedded models for real (no key, no network). The others point
the LLM at the OpenAI-compatible stub (real HTTP on 127.0.0.1) so its answers are known,
and keep the embedded STT and TTS.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.openai_stub import ChatReply, OpenAIStub, ToolCall
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess
from testkit.speech import make_speech
from testkit.waits import until

pytestmark = pytest.mark.e2e

LONG_ANSWER = (
    "Once upon a time there was a small robot who lived in a lighthouse by the sea. "
    "Every night it polished the great lamp until it shone like a star. "
    "Ships passed safely, and the sailors waved at the little robot. "
    "One stormy night the lamp went dark, and the robot climbed the tower in the rain. "
    "It fixed the lamp just in time, and the ships came home."
)


def spelled(text: str) -> str:
    """Lower case, digits as words: whisper writes "two" as "2" or "two"."""
    for digit, word in (("2", "two"), ("4", "four")):
        text = text.replace(digit, word)
    return text.lower()


def types(client: RTCTestClient) -> list[str]:
    return client.types()


def first_index(names: list[str], name: str, start: int = 0) -> int:
    return names.index(name, start)


async def session_info(server: ServerProcess, pc_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{server.url}/api/sessions/{pc_id}")).json()


async def wait_count(
    client: RTCTestClient, match: Callable[[dict[str, Any]], bool], count: int, within: float
) -> None:
    deadline = time.monotonic() + within
    while sum(1 for m in client.messages if match(m)) < count:
        assert time.monotonic() < deadline, f"only {client.types()[-12:]}"
        await asyncio.sleep(0.05)


def is_type(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("type") == name


# -- the embedded models, for real --------------------------------------------------------


async def test_two_spoken_turns_with_the_embedded_models(
    start_server: Callable[..., ServerProcess], audio_dir: Path
) -> None:
    server = start_server(preload_models="true", llm_max_tokens="24")
    server.wait_models_ready()
    question = make_speech(audio_dir, "two-plus-two", "What is two plus two?", after=4.0)
    follow_up = make_speech(audio_dir, "follow-up", "Thank you very much.", before=0.2, after=4.0)
    async with RTCTestClient(server.url, wav=str(question)) as client:
        user_text = await client.wait_for(is_type("user-llm-text"), within=30)
        heard = [m["data"]["text"] for m in client.messages if m["type"] == "user-transcription"]
        print("heard:", heard, "->", user_text["data"]["text"])
        assert "two plus two" in spelled(user_text["data"]["text"])
        await client.wait_for(is_type("bot-stopped-speaking"), within=40)
        names = types(client)
        order = [
            "user-started-speaking",
            "user-stopped-speaking",
            "user-llm-text",
            "bot-llm-started",
            "bot-llm-text",
            "bot-started-speaking",
            "bot-stopped-speaking",
        ]
        positions = [first_index(names, n) for n in order]
        assert positions == sorted(positions), names
        assert "metrics" in names and "bot-tts-text" in names and "bot-output" in names
        spoke_at = next(m for m in client.messages if m["type"] == "bot-started-speaking")
        assert spoke_at is not None
        assert client.audio.loud_frames() >= 10, "bot audio was received"

        # A second turn: the context carries over.
        mark = len(client.messages)
        client.play(str(follow_up))
        try:
            await wait_count(client, is_type("bot-stopped-speaking"), 2, within=45)
        finally:
            print("after the follow-up:", client.types()[mark:])
        transcript = (await session_info(server, client.pc_id))["conversation"]["transcript"]
        roles = [m["role"] for m in transcript]
        assert roles == ["user", "assistant", "user", "assistant"], transcript
        assert "two plus two" in spelled(transcript[0]["content"])
        assert "thank" in transcript[2]["content"].lower()


# -- the LLM at the stub ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stub_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    server = start_server(
        **stub.server_settings(
            preload_models="true",
            stt="local",
            tts="local",
            llm_model="stub-model",
            function_call_report_level="full",
            demo_tools="true",  # research_topic, the demo async tool
        )
    )
    server.wait_models_ready()
    return server


@pytest.fixture
def fresh_stub(stub: OpenAIStub) -> Iterator[OpenAIStub]:
    stub.reset()
    yield stub
    stub.reset()


async def test_barge_in_silences_the_bot_and_truncates_its_message(
    stub_server: ServerProcess, fresh_stub: OpenAIStub, audio_dir: Path
) -> None:
    fresh_stub.script_chat(LONG_ANSWER)
    interruption = make_speech(
        audio_dir, "wait", "Wait, wait a moment please.", before=0.3, after=3.0
    )
    async with RTCTestClient(stub_server.url) as client:
        client.send_rtvi("send-text", {"content": "Tell me a long story."})
        await client.wait_for(is_type("bot-started-speaking"), within=20)
        started = time.monotonic()
        # About a second of the bot's voice has been heard (20 ms frames).
        await until(lambda: client.audio.loud_frames(since=started) >= 50, within=20)
        assert client.audio.loud_frames(since=time.monotonic() - 0.5) > 5, "the bot is talking"
        onset = client.play(str(interruption)) + 0.3  # the WAV starts with 0.3 s of silence
        await client.wait_for(is_type("user-started-speaking"), within=5)
        await client.wait_for(is_type("bot-interrupted"), within=2)
        # The bot goes quiet, and while the user still talks (the interruption comes
        # before the end of the user's turn); how fast is bench/interruptions.py's business.
        deadline = time.monotonic() + 30
        while client.silent_since(onset) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        quiet_at = client.silent_since(onset)
        assert quiet_at is not None, "bot audio never went silent"
        print(f"barge-in: bot silent {1000 * (quiet_at - onset):.0f} ms after speech onset")
        await client.played_out()  # the speech and its 3 s of silence: the user stopped
        await client.wait_for(is_type("user-stopped-speaking"), within=30)
        names = types(client)
        last_stop = len(names) - 1 - names[::-1].index("user-stopped-speaking")
        assert names.index("bot-interrupted") < last_stop, names
        await asyncio.sleep(0.3)
        transcript = (await session_info(stub_server, client.pc_id))["conversation"]["transcript"]
        spoken = next(m for m in transcript if m["role"] == "assistant")
        assert spoken["interrupted"] is True
        assert 0 < len(spoken["content"]) < len(LONG_ANSWER)
        assert LONG_ANSWER.startswith(spoken["content"].split()[0])


async def test_tools_run_and_their_results_reach_the_answer(
    stub_server: ServerProcess, fresh_stub: OpenAIStub
) -> None:
    fresh_stub.script_chat(
        ChatReply("", (ToolCall("get_current_time", {"timezone": "UTC"}),)),
        "It is time to go.",
    )
    async with RTCTestClient(stub_server.url) as client:
        client.send_rtvi("send-text", {"content": "What time is it?"})
        await client.wait_for(is_type("bot-stopped-speaking"), within=20)
        names = types(client)
        calls = [
            first_index(names, "llm-function-call-started"),
            first_index(names, "llm-function-call-in-progress"),
            first_index(names, "llm-function-call-stopped"),
        ]
        assert calls == sorted(calls)
        stopped = next(m for m in client.messages if m["type"] == "llm-function-call-stopped")
        assert stopped["data"]["function_name"] == "get_current_time"
        assert "time" in stopped["data"]["result"]
        requests = fresh_stub.requests("/v1/chat/completions")
        assert len(requests) == 2
        assert requests[0].body["tools"], "the tools were offered"
        tool_message = requests[1].body["messages"][-1]
        assert tool_message["role"] == "tool" and "time" in tool_message["content"]
        outputs = [m["data"]["text"] for m in client.messages if m["type"] == "bot-output"]
        assert outputs == ["It is time to go."]


async def test_an_async_tool_reports_progress_into_the_context(
    stub_server: ServerProcess, fresh_stub: OpenAIStub
) -> None:
    fresh_stub.script_chat(
        ChatReply("Let me look into it.", (ToolCall("research_topic", {"topic": "owls"}),)),
        "Owls are fascinating.",
    )
    async with RTCTestClient(stub_server.url) as client:
        client.send_rtvi("send-text", {"content": "Research owls for me."})
        await client.wait_for(is_type("llm-function-call-stopped"), within=20)
        await wait_count(client, is_type("bot-llm-started"), 2, within=10)
        # bot-llm-started can reach us before the request reaches the stub.
        for _ in range(100):
            requests = fresh_stub.requests("/v1/chat/completions")
            if len(requests) >= 2:
                break
            await asyncio.sleep(0.05)
        last = requests[-1].body["messages"]
        developer = [m for m in last if m["role"] == "developer"]
        assert len(developer) >= 2, "intermediate and final results arrive as developer messages"
        assert all('"type": "async_tool"' in m["content"] for m in developer)
        assert '"status": "finished"' in developer[-1]["content"]


async def test_text_only_answer_and_greeting(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub
) -> None:
    stub.reset()
    stub.script_chat("Just text.")
    server = start_server(
        **stub.server_settings(stt="local", tts="local", greeting="Hi, I am Parley.")
    )
    client = RTCTestClient(server.url)
    try:
        await client.connect()
        greeting = await client.wait_for(is_type("bot-output"), within=20)
        assert greeting["data"] == {
            "text": "Hi, I am Parley.",
            "spoken": True,
            "aggregated_by": "sentence",
        }
        await client.wait_for(is_type("bot-stopped-speaking"), within=10)
        client.send_rtvi(
            "send-text", {"content": "Type to me.", "options": {"audio_response": False}}
        )
        reply = await client.wait_for(
            lambda m: m.get("type") == "bot-output" and not m["data"]["spoken"], within=10
        )
        assert reply["data"]["text"].strip() == "Just"
        await wait_count(client, is_type("bot-llm-stopped"), 2, within=10)
        assert types(client).count("bot-started-speaking") == 1, "the text answer is not spoken"
    finally:
        await client.close()
        stub.reset()
