"""A handler that raises costs what it was handling, never the call.

A real server (in process, so that a test can plant a fault in a live session) and a
real WebRTC client. Each test breaks one handler on a path that aiortc drives (inbound
audio, the conversation's events, playout, the data channel) and shows that the call
goes on: the client is still answered, audio still flows, and each fault is counted in
``parley_errors_total{kind="handler"}``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from pipeline.events import BotStartedSpeaking, Emitter, Event
from server.session.faults import LOG_INTERVAL, SessionFaults
from testkit.app_server import AppServer, serve_app
from testkit.openai_stub import OpenAIStub
from testkit.openai_stub import openai_stub_fixture as openai_stub_fixture
from testkit.rtc_client import RTCTestClient

pytestmark = pytest.mark.e2e

HANDLER_ERRORS = 'parley_errors_total{kind="handler"}'


class Broken:
    """A handler that raises every time it is called, and counts the calls."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.calls = 0

    def __call__(self, *args: Any) -> None:
        self.calls += 1
        raise RuntimeError(f"{self.what} is broken")


@pytest.fixture
async def served(openai_stub: OpenAIStub) -> AsyncIterator[AppServer]:
    async with serve_app(openai_stub) as app:
        yield app


@pytest.fixture
async def client(served: AppServer) -> AsyncIterator[RTCTestClient]:
    connected = RTCTestClient(served.url)
    await connected.connect()
    yield connected
    await connected.close()


async def until(predicate: Any, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def assert_still_answering(client: RTCTestClient) -> None:
    reply = await client.request("echo", {"still": "here"})
    assert reply["data"] == {"t": "echo", "d": {"still": "here"}}
    assert client.pc.connectionState == "connected"


async def test_a_failing_audio_handler_loses_frames_not_the_call(
    served: AppServer, client: RTCTestClient, openai_stub: OpenAIStub
) -> None:
    session = served.session(client.pc_id)
    vad = Broken("the VAD")
    session.voice.push_audio = vad  # every inbound frame now raises inside aiortc's receive
    await until(lambda: vad.calls >= 50)  # a second of audio, every frame a fault
    await assert_still_answering(client)
    openai_stub.script_chat("Still here.")
    client.send_rtvi("send-text", {"content": "Are you there?"})
    output = await client.wait_for(lambda m: m.get("type") == "bot-output")
    assert output["data"]["text"] == "Still here."
    assert served.registry.get(session.pc_id) is session
    assert session.faults.count >= 50
    assert await served.metric(HANDLER_ERRORS) >= 50


async def test_a_failing_vad_event_handler_is_counted_and_the_call_goes_on(
    served: AppServer, client: RTCTestClient, speech_wav: Path
) -> None:
    session = served.session(client.pc_id)
    transcriber = Broken("the transcriber")
    session.voice.transcriber.handle = transcriber  # VAD events now reach a broken handler
    client.play(str(speech_wav))
    await until(lambda: transcriber.calls >= 2, within=10)  # speech started, stopped
    await assert_still_answering(client)
    assert session.faults.count >= transcriber.calls
    assert await served.metric(HANDLER_ERRORS) >= transcriber.calls


async def test_failing_event_and_playout_listeners_leave_the_bot_speaking(
    served: AppServer, client: RTCTestClient, openai_stub: OpenAIStub
) -> None:
    session = served.session(client.pc_id)
    on_event, on_frame = Broken("a BotStartedSpeaking subscriber"), Broken("the level meter")
    session.voice.conversation.events.on(BotStartedSpeaking, on_event)
    session.outbound.on_frame_sent = on_frame  # called by the track for every frame it plays
    openai_stub.script_chat("One two three four five six seven.")
    started = time.monotonic()
    client.send_rtvi("send-text", {"content": "Count, please."})
    await client.wait_for(lambda m: m.get("type") == "bot-stopped-speaking", within=15)
    assert on_event.calls == 1 and on_frame.calls > 10
    # The track kept sending: the whole answer reached the client, not one frame of it.
    assert client.audio.loud_frames(since=started) > 10
    await assert_still_answering(client)
    assert session.faults.count == on_event.calls + on_frame.calls
    assert await served.metric(HANDLER_ERRORS) == session.faults.count


async def test_a_failing_data_channel_callback_costs_that_message_only(
    served: AppServer, client: RTCTestClient
) -> None:
    session = served.session(client.pc_id)
    listener = Broken("an RTVI error listener")
    session.rtvi.error_listeners.insert(0, listener)
    for _ in range(3):
        client.send_raw("{not json")  # reported to the listeners, from aiortc's callback
    await until(lambda: listener.calls == 3)
    await assert_still_answering(client)
    errors = [m for m in client.messages if m.get("type") == "error"]
    assert [e["data"]["error"] for e in errors] == ["malformed JSON"] * 3, "still told"
    assert session.faults.count == 3
    assert await served.metric(HANDLER_ERRORS) == 3


def test_faults_are_all_counted_and_logged_at_most_every_interval() -> None:
    now = [0.0]
    faults = SessionFaults("pc-1", clock=lambda: now[0])
    places: list[str] = []
    faults.listeners.append(places.append)
    faults.listeners.append(Broken("a metrics listener"))  # must not raise back
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="ERROR")
    try:
        for _ in range(100):  # 2 s of a handler failing on every frame
            faults.report("inbound audio", RuntimeError("boom"))
            now[0] += 0.02
        now[0] += LOG_INTERVAL
        faults.report("inbound audio", RuntimeError("boom"))
    finally:
        logger.remove(sink)
    assert faults.count == 101 and places == ["inbound audio"] * 101
    mine = [line for line in lines if "inbound audio failed" in line]
    assert len(mine) == 2, mine
    assert mine[0].startswith("session pc-1: ")
    assert "(99 more since the last report)" in mine[1]
    assert len([line for line in lines if "a fault listener failed" in line]) == 2


def test_emitter_isolates_a_failing_handler_when_asked() -> None:
    events = Emitter()
    seen: list[str] = []
    events.on(BotStartedSpeaking, Broken("first"))
    events.on(BotStartedSpeaking, lambda e: seen.append("second"))
    with pytest.raises(RuntimeError):  # by default a unit test sees the fault
        events.emit(BotStartedSpeaking(0.0))
    failed: list[Event] = []
    events.on_error = lambda exc, event: failed.append(event)
    events.emit(BotStartedSpeaking(1.0))
    assert seen == ["second"] and failed == [BotStartedSpeaking(1.0)]
