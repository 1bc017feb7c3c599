"""RTVI 2.1 over WebRTC, beside 1.4: a 2.1 client's spoken progress, text answers, keypad
presses into the conversation and the VAD's own events; a client of another major is
refused and served as 1.x, the call going on.

A real server (subprocess) with every model at the OpenAI-compatible stub, and the aiortc
test client announcing the version under test in its ``client-ready``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from itertools import groupby
from pathlib import Path
from typing import Any

import pytest

from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"


def is_type(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("type") == name


def of_type(client: RTCTestClient, name: str) -> list[dict[str, Any]]:
    return [m for m in client.messages if m.get("type") == name]


@pytest.fixture(scope="module")
def v2_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    # "#" ends a keypad entry at once (else it waits for the keys to stop coming).
    return start_server(**stub.server_settings(telephony_end_digit="#"))


@pytest.fixture
async def client(v2_server: ServerProcess, stub: OpenAIStub) -> AsyncIterator[RTCTestClient]:
    stub.reset()
    connected = RTCTestClient(v2_server.url, rtvi_version="2.1.0")
    try:
        await connected.connect()
        yield connected
        connected.assert_valid_rtvi()
    finally:
        await connected.close()
        stub.reset()


async def test_a_2_1_client_sees_each_sentence_spoken_word_by_word(
    client: RTCTestClient, stub: OpenAIStub
) -> None:
    ready = next(m for m in client.messages if m["type"] == "bot-ready")
    assert ready["data"]["version"] == "2.1.0"
    assert not of_type(client, "error-response"), "2.1 is served without complaint"
    stub.config.tts_seconds_per_char = 0.05  # about a word every 15 frames: progress shows
    sentences = ["First sentence here.", "Then a second one, a little longer."]
    stub.script_chat(" ".join(sentences))
    client.send_rtvi("send-text", {"content": "Talk to me."})
    await client.wait_for(is_type("bot-stopped-speaking"), within=20)

    outputs = [m["data"] for m in of_type(client, "bot-output")]
    assert all("spoken" not in o and o["will_be_spoken"] for o in outputs), "2.x fields only"
    segments = [list(g) for _, g in groupby(outputs, key=lambda o: o["segment_id"])]
    assert [s[0]["text"] for s in segments] == sentences
    assert len({s[0]["segment_id"] for s in segments}) == 2, "one id per sentence"
    for segment in segments:
        statuses = [o["spoken_status"] for o in segment]
        assert statuses[0] == "new" and statuses[-1] == "completed", statuses
        assert set(statuses[1:-1]) == {"in-progress"}, statuses
        heard = [o["spoken_progress"]["accumulated_text"] for o in segment]
        assert heard[0] == "" and heard[-1] == segment[0]["text"]
        assert heard == sorted(heard, key=len), "progress only moves on"
        for o in segment:
            progress = o["spoken_progress"]
            assert progress["accumulated_text"] + progress["remaining_text"] == o["text"]
    assert len(segments[1]) >= 5, "word by word through the longer sentence"
    # Unchanged for 2.x: captions as each sentence starts, what the voice said once played.
    assert [m["data"]["text"] for m in of_type(client, "bot-tts-text")] == sentences
    assert [m["data"]["text"] for m in of_type(client, "bot-transcription")] == sentences


async def test_a_2_1_client_gets_a_text_answer_by_the_sentence(
    client: RTCTestClient, stub: OpenAIStub
) -> None:
    stub.script_chat("Only text. Nothing spoken, not a word.")
    client.send_rtvi("send-text", {"content": "Write it.", "options": {"audio_response": False}})
    await client.wait_for(is_type("bot-llm-stopped"), within=10)
    assert [m["data"] for m in of_type(client, "bot-output")] == [
        {"text": "Only text.", "aggregated_by": "sentence", "will_be_spoken": False,
         "segment_id": 1},
        {"text": "Nothing spoken, not a word.", "aggregated_by": "sentence",
         "will_be_spoken": False, "segment_id": 2},
    ]  # fmt: skip
    names = client.types()
    assert names.index("bot-llm-stopped") > max(i for i, n in enumerate(names) if n == "bot-output")


async def test_dtmf_from_a_2_1_client_reaches_the_conversation(
    client: RTCTestClient, stub: OpenAIStub
) -> None:
    stub.script_chat("Twelve, got it.")
    client.send_rtvi("dtmf", {"buttons": ["1", "2", "#"]})
    await client.wait_for(lambda m: m.get("type") == "bot-output" and "Twelve" in m["data"]["text"],
                          within=15)  # fmt: skip
    (request,) = stub.requests(CHAT)
    users = [m["content"] for m in request.body["messages"] if m["role"] == "user"]
    assert users == ["(pressed on the keypad: 12)"]
    # A key the keypad does not have is refused, with nothing pressed.
    bad = client.send_rtvi("dtmf", {"buttons": ["3", "x"]})
    refused = await client.wait_for(lambda m: m.get("id") == bad)
    assert refused["type"] == "error-response" and "'x'" in refused["data"]["error"]
    info = await client.request("session-info")
    assert info["data"]["d"]["conversation"]["keypad"]["pressed"] == 3


async def test_a_1_x_client_is_served_as_before_and_cannot_send_dtmf(
    v2_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    async with RTCTestClient(v2_server.url, rtvi_version="1.4.0") as legacy:
        ready = next(m for m in legacy.messages if m["type"] == "bot-ready")
        assert ready["data"]["version"] == "1.4.0"
        press = legacy.send_rtvi("dtmf", {"buttons": ["1"]})
        refused = await legacy.wait_for(lambda m: m.get("id") == press)
        assert refused["type"] == "error-response" and "RTVI 2" in refused["data"]["error"]
        stub.script_chat("Still the old way.")
        legacy.send_rtvi("send-text", {"content": "Hello?"})
        await legacy.wait_for(is_type("bot-stopped-speaking"), within=15)
        assert [m["data"] for m in of_type(legacy, "bot-output")] == [
            {"text": "Still the old way.", "spoken": True, "aggregated_by": "sentence"}
        ]
        legacy.assert_valid_rtvi()


async def test_a_3_0_client_is_refused_and_the_call_goes_on(
    v2_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    async with RTCTestClient(v2_server.url, rtvi_version="3.0.0") as future:
        ready = next(m for m in future.messages if m["type"] == "bot-ready")
        refusal = next(m for m in future.messages if m["type"] == "error-response")
        assert refusal["id"] == ready["id"]
        assert "unsupported RTVI version '3.0.0'" in refusal["data"]["error"]
        assert ready["data"]["version"] == "1.4.0", "served as 1.x"
        stub.script_chat("Here anyway.")
        future.send_rtvi("send-text", {"content": "Anyone?"})
        output = await future.wait_for(is_type("bot-output"), within=15)
        assert output["data"] == {
            "text": "Here anyway.",
            "spoken": True,
            "aggregated_by": "sentence",
        }
        future.assert_valid_rtvi()


async def test_the_vads_own_events_reach_2_x_clients_only(
    v2_server: ServerProcess, stub: OpenAIStub, speech_wav: Path
) -> None:
    stub.reset()
    stub.script_chat("Heard you.", "Heard you.")
    async with (
        RTCTestClient(v2_server.url, rtvi_version="2.1.0") as current,
        RTCTestClient(v2_server.url, rtvi_version="1.4.0") as legacy,
    ):
        for caller in (current, legacy):
            caller.play(str(speech_wav))
        for caller in (current, legacy):
            await caller.wait_for(is_type("user-stopped-speaking"), within=20)
        await current.wait_for(is_type("vad-user-stopped-speaking"), within=5)
        names = current.types()
        assert names.index("vad-user-started-speaking") < names.index("user-started-speaking")
        assert names.index("vad-user-started-speaking") < names.index("vad-user-stopped-speaking")
        assert not [n for n in legacy.types() if n.startswith("vad-")]
        current.assert_valid_rtvi()
    stub.reset()
