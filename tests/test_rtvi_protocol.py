"""The whole RTVI protocol over WebRTC: every message type, both directions.

A real server (subprocess) with every model at the OpenAI-compatible stub, and the aiortc
test client. Every message a client receives is validated against the models in
``server/rtvi/server_messages.py`` when the test ends.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.rtvi.protocol import PROTOCOL_VERSION
from testkit.openai_stub import ChatReply, Fault, OpenAIStub, ToolCall
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e

CLIENT_TOOLS = [
    {
        "name": "get_location",
        "description": "Where the user is.",
        "parameters": {
            "type": "object",
            "properties": {"precision": {"type": "string"}},
            "required": ["precision"],
        },
    },
    {"name": "slow_lookup", "description": "Never answered in time.", "timeout": 1},
]


def is_type(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("type") == name


def of_type(client: RTCTestClient, name: str) -> list[dict[str, Any]]:
    return [m for m in client.messages if m.get("type") == name]


def by_call(client: RTCTestClient, name: str) -> dict[str, dict[str, Any]]:
    """The data of the ``name`` messages, by tool_call_id."""
    return {m["data"]["tool_call_id"]: m["data"] for m in of_type(client, name)}


def assert_all_valid(client: RTCTestClient) -> None:
    client.assert_valid_rtvi()


async def assert_still_serving(client: RTCTestClient) -> None:
    reply = await client.request("echo", {"still": "here"})
    assert reply["type"] == "server-response"
    assert reply["data"] == {"t": "echo", "d": {"still": "here"}}


def stub_settings(stub: OpenAIStub) -> dict[str, str]:
    return stub.server_settings(llm_model="stub-model")


@pytest.fixture(scope="module")
def rtvi_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    levels = {"get_current_time": "full", "no_such_tool": "none"}
    return start_server(
        **stub_settings(stub),
        function_call_report_levels=json.dumps(levels),
        client_tools=json.dumps(CLIENT_TOOLS),
        rtvi_bot_tts_audio="true",
        rtvi_audio_levels="true",
        rtvi_system_log="INFO",
    )


@pytest.fixture
async def client(rtvi_server: ServerProcess, stub: OpenAIStub) -> AsyncIterator[RTCTestClient]:
    stub.reset()
    connected = RTCTestClient(rtvi_server.url)
    try:
        await connected.connect()
        yield connected
        assert_all_valid(connected)
    finally:
        await connected.close()
        stub.reset()


# -- handshake and requests ------------------------------------------------------------------


async def test_client_ready_gets_bot_ready(client: RTCTestClient) -> None:
    ready = next(m for m in client.messages if m["type"] == "bot-ready")
    assert ready["id"] == "t1"
    assert ready["data"]["version"] == PROTOCOL_VERSION == "1.4.0"
    assert ready["data"]["about"]["library"] == "parley"


async def test_client_message_is_answered_by_its_handler(client: RTCTestClient) -> None:
    await assert_still_serving(client)
    info = await client.request("session-info")
    assert info["type"] == "server-response" and info["data"]["d"]["pc_id"] == client.pc_id
    unknown = await client.request("no-such-request", 1)
    assert unknown["type"] == "error-response"
    assert "no handler" in unknown["data"]["error"]


async def test_disconnect_bot_closes_the_session(
    client: RTCTestClient, rtvi_server: ServerProcess
) -> None:
    client.send_rtvi("disconnect-bot", {})
    await client.wait_for(lambda m: m.get("message", {}).get("type") == "peerLeft")
    async with httpx.AsyncClient(base_url=rtvi_server.url) as http:
        for _ in range(50):
            if (await http.get(f"/api/sessions/{client.pc_id}")).status_code == 404:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the session is still there")


# -- a spoken answer ---------------------------------------------------------------------------


async def test_send_text_gets_a_spoken_answer_with_every_bot_message(
    client: RTCTestClient, stub: OpenAIStub
) -> None:
    answer = "First sentence here. Second one."
    stub.script_chat(answer)
    client.send_rtvi("send-text", {"content": "Talk to me."})
    await client.wait_for(is_type("bot-stopped-speaking"), within=15)
    await client.wait_for(is_type("bot-tts-stopped"), within=5)

    assert of_type(client, "user-llm-text")[0]["data"] == {"text": "Talk to me."}
    llm_text = [m["data"]["text"] for m in of_type(client, "bot-llm-text")]
    assert len(llm_text) == 5 and "".join(llm_text) == answer, "one per streamed chunk"
    sentences = ["First sentence here.", "Second one."]
    assert [m["data"]["text"] for m in of_type(client, "bot-tts-text")] == sentences
    outputs = [m["data"] for m in of_type(client, "bot-output")]
    assert outputs == [{"text": s, "spoken": True, "aggregated_by": "sentence"} for s in sentences]
    assert [m["data"]["text"] for m in of_type(client, "bot-transcription")] == sentences
    # Every TTS byte reached the client as bot-tts-audio, at the TTS's rate.
    audio = of_type(client, "bot-tts-audio")
    pcm = b"".join(base64.b64decode(m["data"]["audio"]) for m in audio)
    assert len(pcm) == 2 * sum(stub.tts_samples(s) for s in sentences)
    assert {m["data"]["sample_rate"] for m in audio} == {24000}
    # The bot's level while it spoke (the stub's tone is at -10 dBFS), then 0.
    levels = [m["data"]["value"] for m in of_type(client, "bot-audio-level")]
    assert len(levels) >= 3 and max(levels) > 0.7 and levels[-1] == 0.0
    names = client.types()
    for first, then in [
        ("bot-llm-started", "bot-llm-text"),
        ("bot-llm-text", "bot-llm-stopped"),
        ("bot-tts-started", "bot-tts-audio"),
        ("bot-started-speaking", "bot-audio-level"),
        ("bot-tts-text", "bot-output"),
        ("bot-output", "bot-stopped-speaking"),
    ]:
        assert names.index(first) < names.index(then), (first, then, names)
    kinds = {kind for m in of_type(client, "metrics") for kind in m["data"]}
    assert {"ttfb", "processing", "characters", "tokens"} <= kinds


async def test_send_text_options(client: RTCTestClient, stub: OpenAIStub) -> None:
    stub.script_chat("Only text.")
    client.send_rtvi(
        "send-text", {"content": "Remember this.", "options": {"run_immediately": False}}
    )
    await asyncio.sleep(0.7)
    assert not of_type(client, "bot-llm-started"), "run_immediately=false waits"
    client.send_rtvi("send-text", {"content": "Now answer.", "options": {"audio_response": False}})
    await client.wait_for(is_type("bot-llm-stopped"), within=10)
    messages = stub.requests("/v1/chat/completions")[-1].body["messages"]
    assert [m["content"] for m in messages if m["role"] == "user"] == [
        "Remember this.",
        "Now answer.",
    ]
    outputs = [m["data"] for m in of_type(client, "bot-output")]
    assert outputs and all(o["spoken"] is False and o["aggregated_by"] == "word" for o in outputs)
    assert "".join(o["text"] for o in outputs) == "Only text."
    assert not of_type(client, "bot-tts-started") and not of_type(client, "bot-transcription")


async def test_barge_in_by_text_sends_bot_interrupted(
    client: RTCTestClient, stub: OpenAIStub
) -> None:
    stub.script_chat("This answer goes on. " * 12, "Fine.")
    client.send_rtvi("send-text", {"content": "Talk for a while."})
    await client.wait_for(
        lambda m: m.get("type") == "bot-audio-level" and m["data"]["value"] > 0.5, within=10
    )
    client.send_rtvi("send-text", {"content": "Stop, please."})
    await client.wait_for(is_type("bot-interrupted"), within=5)
    names = client.types()
    cut = names.index("bot-interrupted")
    levels = [m for m in client.messages[:cut] if m["type"] == "bot-audio-level"]
    assert levels[-1]["data"]["value"] == 0.0, "the flushed audio's level drops to 0 at once"


# -- the user speaking -----------------------------------------------------------------------


async def test_speech_gives_user_messages(
    client: RTCTestClient, stub: OpenAIStub, speech_wav: Path
) -> None:
    stub.config.transcript = "hello from the stub"
    client.play(str(speech_wav))
    # (an interim transcription may come first: the early words of a pause)
    transcript = await client.wait_for(
        lambda m: m.get("type") == "user-transcription" and m["data"]["final"], within=15
    )
    data = transcript["data"]
    assert data["text"] == "hello from the stub" and data["final"] is True
    assert data["timestamp"].endswith("+00:00") and isinstance(data["user_id"], str)
    text = await client.wait_for(is_type("user-llm-text"), within=5)
    # (the speech may be cut into two utterances: one transcript each, joined)
    assert text["data"]["text"].startswith("hello from the stub")
    names = client.types()
    assert names.index("user-started-speaking") < names.index("user-stopped-speaking")
    levels = [m["data"]["value"] for m in of_type(client, "user-audio-level")]
    assert levels and max(levels) > 0.3, "espeak speech is loud"
    # 10 Hz at most: about 2 s of speech (and its tail) is not 100 messages.
    assert len(levels) < 60


# -- server pushes ------------------------------------------------------------------------------


async def test_server_message_from_the_app(
    client: RTCTestClient, rtvi_server: ServerProcess
) -> None:
    payload = {"kind": "notice", "items": [1, 2]}
    async with httpx.AsyncClient(base_url=rtvi_server.url) as http:
        url = f"/api/sessions/{client.pc_id}/server-message"
        assert (await http.post(url, json={"data": payload})).json()["sent"] is True
        missing = await http.post("/api/sessions/nope/server-message", json={"data": 1})
        assert missing.status_code == 404
    message = await client.wait_for(is_type("server-message"))
    assert message["data"] == payload


async def test_failed_llm_call_gives_error_and_system_log(
    client: RTCTestClient, stub: OpenAIStub
) -> None:
    stub.script_chat(Fault.http(500))
    client.send_rtvi("send-text", {"content": "Hello?"})
    error = await client.wait_for(is_type("error"), within=10)
    assert error["data"]["fatal"] is False and error["data"]["error"].startswith("llm")
    log = await client.wait_for(
        lambda m: m.get("type") == "system-log" and "bot turn failed" in m["data"]["text"]
    )
    assert log["data"]["text"].startswith("WARNING")
    await assert_still_serving(client)


async def test_server_shutdown_is_a_fatal_error(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub
) -> None:
    server = start_server(**stub_settings(stub))
    client = RTCTestClient(server.url)
    try:
        await client.connect()
        server.proc.send_signal(signal.SIGTERM)
        error = await client.wait_for(is_type("error"), within=10)
        assert error["data"] == {"error": "the server is shutting down", "fatal": True}
        await client.wait_for(lambda m: m.get("message", {}).get("type") == "peerLeft")
        assert_all_valid(client)
    finally:
        await client.close()
        await asyncio.to_thread(server.stop)


# -- function calls -------------------------------------------------------------------------------


async def test_report_levels_per_tool(client: RTCTestClient, stub: OpenAIStub) -> None:
    calls = (
        ToolCall("get_current_time", {"timezone": "UTC"}, id="c_full"),
        ToolCall("no_such_tool", {"secret": "s3cr3t"}, id="c_none"),
        ToolCall("other_tool", {"secret": "s3cr3t"}, id="c_name"),
    )
    stub.script_chat(ChatReply("", calls), "Done.")
    client.send_rtvi("send-text", {"content": "Use your tools."})
    await client.wait_for(
        lambda m: m.get("type") == "bot-output" and m["data"]["text"] == "Done.", within=10
    )
    started = [m["data"] for m in of_type(client, "llm-function-call-started")]
    assert started == [{"function_name": "get_current_time"}, {}, {"function_name": "other_tool"}]
    progress = by_call(client, "llm-function-call-in-progress")
    assert progress == {
        "c_full": {
            "tool_call_id": "c_full",
            "function_name": "get_current_time",
            "arguments": {"timezone": "UTC"},
        },
        "c_none": {"tool_call_id": "c_none"},
        "c_name": {"tool_call_id": "c_name", "function_name": "other_tool"},
    }
    stopped = by_call(client, "llm-function-call-stopped")
    assert set(stopped["c_full"]["result"]) >= {"time", "timezone"}
    assert stopped["c_none"] == {"tool_call_id": "c_none", "cancelled": False}
    assert stopped["c_name"] == {
        "tool_call_id": "c_name",
        "cancelled": False,
        "function_name": "other_tool",
    }
    assert "s3cr3t" not in json.dumps(client.messages)


async def test_client_side_tool_round_trip(client: RTCTestClient, stub: OpenAIStub) -> None:
    call = ToolCall("get_location", {"precision": "city"}, id="loc1")
    stub.script_chat(ChatReply("", (call,)), "You are in Paris.")
    client.send_rtvi("send-text", {"content": "Where am I?"})
    progress = await client.wait_for(is_type("llm-function-call-in-progress"), within=10)
    # The default level is "name", but the client runs this tool: it gets the arguments.
    assert progress["data"] == {
        "tool_call_id": "loc1",
        "function_name": "get_location",
        "arguments": {"precision": "city"},
    }
    result = {
        "function_name": "get_location",
        "tool_call_id": "loc1",
        "arguments": {"precision": "city"},
        "result": {"city": "Paris"},
    }
    client.send_rtvi("llm-function-call-result", result)
    stopped = await client.wait_for(is_type("llm-function-call-stopped"), within=5)
    assert stopped["data"] == {
        "tool_call_id": "loc1",
        "cancelled": False,
        "function_name": "get_location",
    }
    output = await client.wait_for(is_type("bot-output"), within=10)
    assert output["data"]["text"] == "You are in Paris."
    messages = stub.requests("/v1/chat/completions")[-1].body["messages"]
    tool = next(m for m in messages if m["role"] == "tool")
    assert tool["tool_call_id"] == "loc1" and json.loads(tool["content"]) == {"city": "Paris"}
    # The call is finished: another answer for it, or for an unknown id, is refused.
    again = client.send_rtvi("llm-function-call-result", result)
    refused = await client.wait_for(lambda m: m.get("id") == again)
    assert refused["type"] == "error-response" and "loc1" in refused["data"]["error"]
    unknown = client.send_rtvi("llm-function-call-result", {**result, "tool_call_id": "zzz"})
    refused = await client.wait_for(lambda m: m.get("id") == unknown)
    assert refused["type"] == "error-response" and "zzz" in refused["data"]["error"]


async def test_client_side_tool_timeout(client: RTCTestClient, stub: OpenAIStub) -> None:
    call = ToolCall("slow_lookup", {}, id="slow1")
    stub.script_chat(ChatReply("", (call,)), "It did not answer.")
    client.send_rtvi("send-text", {"content": "Look it up."})
    await client.wait_for(is_type("llm-function-call-in-progress"), within=10)
    error = await client.wait_for(is_type("error"), within=5)
    assert error["data"]["fatal"] is False
    assert "slow_lookup" in error["data"]["error"] and "slow1" in error["data"]["error"]
    output = await client.wait_for(is_type("bot-output"), within=10)
    assert output["data"]["text"] == "It did not answer."
    messages = stub.requests("/v1/chat/completions")[-1].body["messages"]
    tool = next(m for m in messages if m["role"] == "tool")
    assert "did not run slow_lookup within 1s" in json.loads(tool["content"])["error"]
    late = client.send_rtvi(
        "llm-function-call-result",
        {"function_name": "slow_lookup", "tool_call_id": "slow1", "arguments": {}, "result": "x"},
    )
    refused = await client.wait_for(lambda m: m.get("id") == late)
    assert refused["type"] == "error-response"


# -- bad payloads ------------------------------------------------------------------------------

BAD_PAYLOADS: list[tuple[str, Any, str]] = [
    ("client-ready", {"version": 5}, "version"),
    ("client-ready", {"version": "2.1.0", "about": {"platform": "x"}}, "about.library"),
    ("client-message", {"d": 1}, "t"),
    ("client-message", {"t": ["echo"]}, "t"),
    ("send-text", {"content": 3}, "content"),
    ("send-text", {"content": "hi", "options": {"run_immediately": "maybe"}}, "run_immediately"),
    ("send-text", {"content": "   "}, "empty"),
    ("disconnect-bot", "now", "data"),
    ("llm-function-call-result", {}, "function_name"),
    ("llm-function-call-result", {"function_name": "f", "tool_call_id": "i"}, "result"),
    ("llm-function-call-result",
     {"function_name": "f", "tool_call_id": "i", "arguments": {}, "result": 5}, "result"),
    ("llm-function-call-result",
     {"function_name": "f", "tool_call_id": "i", "arguments": [], "result": "r"}, "arguments"),
]  # fmt: skip


async def test_bad_payloads_get_error_responses_and_the_session_goes_on(
    client: RTCTestClient, stub: OpenAIStub
) -> None:
    for type_, data, field in BAD_PAYLOADS:
        msg_id = client.send_rtvi(type_, data)
        answer = await client.wait_for(lambda m, i=msg_id: m.get("id") == i)
        assert answer["type"] == "error-response", (type_, data, answer)
        assert field in answer["data"]["error"], (type_, data, answer)
    # Without an id there is nothing to answer: a non-fatal error instead.
    client.send_raw(json.dumps({"label": "rtvi-ai", "type": "send-text", "data": {}}))
    error = await client.wait_for(is_type("error"))
    assert error["data"]["fatal"] is False
    await assert_still_serving(client)
    stub.script_chat("Still here.")
    client.send_rtvi("send-text", {"content": "Are you there?"})
    output = await client.wait_for(is_type("bot-output"), within=10)
    assert output["data"]["text"] == "Still here."
