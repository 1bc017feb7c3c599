"""A speech-to-speech model in a whole call (``PARLEY_LLM=realtime``) over WebRTC: a real
server with the real VAD and turn-taking, an aiortc client that speaks, and the stub's
realtime endpoint (a real WebSocket on 127.0.0.1) as the model. The stub's STT hears the
clip being played (the local words that drive Parley's turn-taking)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.clip_ear import ClipEar, hearing_stub
from testkit.openai_stub import Fault, OpenAIStub, ToolCall
from testkit.openai_stub.realtime import RealtimeReply, RealtimeScript
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess
from testkit.turn_clips import complete_clip, write_wav

# serial: barge-in timing over real-time audio (see pyproject.toml).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

STORY = (
    "Once upon a time there was a small robot who lived in a lighthouse by the sea. "
    "Every night it polished the great lamp until it shone like a star. "
    "Ships passed safely, and the sailors waved at the little robot."
)


@pytest.fixture(scope="module")
def ear() -> ClipEar:
    return ClipEar()


@pytest.fixture(scope="module")
def models(ear: ClipEar) -> Iterator[OpenAIStub]:
    with hearing_stub(ear, "unused", 0.03) as stub:
        yield stub


@pytest.fixture
def realtime(models: OpenAIStub) -> RealtimeScript:
    models.realtime = RealtimeScript()
    return models.realtime


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], models: OpenAIStub) -> ServerProcess:
    running = start_server(
        **models.realtime_settings(
            preload_models="true",
            greeting="Hello!",
            demo_tools="true",
            # The client sends no echo: the canceller (tested on its own elsewhere) stays
            # out of the timing of speech over the bot, which these tests are about.
            echo_cancellation="false",
        )
    )
    running.wait_models_ready()
    return running


async def ask(client: RTCTestClient, ear: ClipEar, text: str, voice: str, folder: Path) -> float:
    clip = complete_clip(text, voice)
    ear.clip = clip
    return client.play(str(write_wav(clip, folder / "say.wav", 0.0)))


async def greeted(client: RTCTestClient) -> None:
    await client.wait_for(lambda m: m.get("type") == "bot-stopped-speaking", within=20)
    await asyncio.sleep(0.3)


async def transcript(server: ServerProcess, pc_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{server.url}/api/sessions/{pc_id}/transcript")).json()


async def nth(client: RTCTestClient, kind: str, n: int, within: float = 20.0) -> None:
    """Until the ``n``-th message of ``kind`` (a greeting's count too)."""
    await client.wait_for(lambda _: client.types().count(kind) >= n, within=within)


def first_run(levels: list[float]) -> float:
    """Seconds of sound from the first loud frame to the first 0.2 s of quiet (the bot
    paused), counted in 20 ms frames (the test's own loop may stall their arrival)."""
    loud = [rms > 200 for rms in levels]
    start = loud.index(True)
    for n in range(start, len(loud)):
        if not any(loud[n : n + 10]):
            return (n - start) * 0.02
    return (len(loud) - start) * 0.02


def said(client: RTCTestClient, text: str) -> Callable[[dict[str, Any]], bool]:
    """The bot's words so far include ``text`` (a speech-to-speech model's words come
    a few at a time, as its transcript streams)."""
    return lambda _: (
        text
        in " ".join(m["data"]["text"] for m in client.messages if m.get("type") == "bot-output")
    )


async def test_a_question_is_heard_as_audio_and_answered_in_the_models_voice(
    server: ServerProcess, realtime: RealtimeScript, ear: ClipEar, tmp_path: Path
) -> None:
    realtime.replies = ["It is sunny and warm today."]
    async with RTCTestClient(server.url, jitter_frames=1) as client:
        await greeted(client)
        assert client.audio.loud_frames() > 10, "the greeting, in the model's voice"
        asked = await ask(client, ear, "What is the weather like today?", "espeak", tmp_path)
        await client.wait_for(said(client, "sunny"), within=20)
        await nth(client, "bot-stopped-speaking", 2)
        assert client.audio.loud_frames(since=asked + 1.0) > 50, "the answer was heard"
        pc_id = client.pc_id
    conversation = realtime.conversations[-1]
    kinds = [(i["role"], "audio" if "audio_ms" in i else "text") for i in conversation]
    assert kinds == [("assistant", "text"), ("user", "audio"), ("assistant", "audio")], conversation
    assert conversation[0]["content"][0]["text"] == "Hello!"
    assert 1500 < conversation[1]["audio_ms"] < 4000, "the question, as audio"
    record = await transcript(server, pc_id)
    turns = [(t["role"], t["text"]) for t in record["turns"]]
    assert turns[-2:] == [
        ("user", "What is the weather like today?"),
        ("assistant", "It is sunny and warm today."),
    ]


async def test_speech_the_stt_fails_on_is_still_answered_from_its_audio(
    server: ServerProcess,
    models: OpenAIStub,
    realtime: RealtimeScript,
    ear: ClipEar,
    tmp_path: Path,
) -> None:
    # Issue 43: the STT unreachable (every attempt of one utterance answers 503) used to
    # delete the caller's committed audio, and the question went unanswered.
    realtime.replies = ["I heard you all the same."]
    async with RTCTestClient(server.url, jitter_frames=1) as client:
        await greeted(client)
        models.fail_times("stt", 3, Fault.http(503))  # the first try and its two retries
        await ask(client, ear, "What is the weather like today?", "espeak", tmp_path)
        await client.wait_for(said(client, "all the same"), within=25)
        await nth(client, "bot-stopped-speaking", 2)
        pc_id = client.pc_id
    conversation = realtime.conversations[-1]
    kinds = [(i["role"], "audio" if "audio_ms" in i else "text") for i in conversation]
    assert kinds[-2:] == [("user", "audio"), ("assistant", "audio")], conversation
    record = await transcript(server, pc_id)
    turns = [(t["role"], t["text"]) for t in record["turns"]]
    assert turns[-2][0] == "user" and "(speech not transcribed)" in turns[-2][1], turns
    assert turns[-1] == ("assistant", "I heard you all the same.")


async def test_a_barge_in_cuts_the_answer_where_it_was_heard(
    server: ServerProcess, realtime: RealtimeScript, ear: ClipEar, tmp_path: Path
) -> None:
    # The weather twice: the pause after "Wait, stop." may end in a reply made on
    # speculation (the end of the turn predicted), cancelled when the user goes on; it
    # takes a scripted reply too (in 2 of 8 runs before DTX, 2 of 6 after).
    realtime.replies = [STORY, "The weather is sunny.", "The weather is sunny."]
    realtime.chunk_interval = 0.08  # still streaming when the user barges in
    async with RTCTestClient(server.url, jitter_frames=1) as client:
        await greeted(client)
        await ask(client, ear, "Tell me a story.", "espeak", tmp_path)
        await nth(client, "bot-started-speaking", 2)
        began = time.monotonic()
        await asyncio.sleep(2.5)
        await ask(client, ear, "Wait, stop. Tell me about the weather.", "espeak", tmp_path)
        await client.wait_for(lambda m: m.get("type") == "bot-interrupted", within=10)
        await client.wait_for(said(client, "sunny"), within=20)
        pc_id = client.pc_id
        levels = [rms for t, rms in client.audio.frames if t >= began - 0.5]
    truncated = realtime.of_type("conversation.item.truncate")
    # The story, cut where it was heard; a reply made on speculation and cancelled was
    # never heard: 0 ms of it.
    cut = [t for t in truncated if t["audio_end_ms"] > 0]
    assert len(cut) == 1 and realtime.of_type("response.cancel")
    heard_ms = first_run(levels) * 1000  # what the client heard of the story
    assert abs(cut[0]["audio_end_ms"] - heard_ms) < 250, (cut[0], heard_ms)
    bot = [i for i in realtime.conversations[-1] if i.get("transcript") == STORY]
    assert bot and bot[0]["audio_end_ms"] == cut[0]["audio_end_ms"]
    record = await transcript(server, pc_id)
    story = next(t for t in record["turns"] if t["role"] == "assistant" and t["interrupted"])
    assert STORY.startswith(story["text"]) and len(story["text"]) < len(STORY) * 0.7


async def test_a_backchannel_does_not_cancel_and_its_audio_item_goes(
    server: ServerProcess, realtime: RealtimeScript, ear: ClipEar, tmp_path: Path
) -> None:
    realtime.replies = [STORY]
    async with RTCTestClient(server.url, jitter_frames=1) as client:
        await greeted(client)
        await ask(client, ear, "Tell me a story.", "espeak", tmp_path)
        await nth(client, "bot-started-speaking", 2)
        await asyncio.sleep(2.5)
        commits = len(realtime.of_type("input_audio_buffer.commit"))
        await ask(client, ear, "Okay.", "espeak", tmp_path)
        await asyncio.sleep(3.0)
        assert "bot-interrupted" not in client.types()
        await nth(client, "bot-stopped-speaking", 2, within=30)
    assert not realtime.of_type("response.cancel")
    assert not realtime.of_type("conversation.item.truncate")
    assert len(realtime.of_type("input_audio_buffer.commit")) == commits + 1
    users = [i for i in realtime.conversations[-1] if i["role"] == "user"]
    assert len(users) == 1, "the backchannel's audio item was deleted"


async def test_a_tool_and_an_async_tool_answer_through_the_model(
    server: ServerProcess, realtime: RealtimeScript, ear: ClipEar, tmp_path: Path
) -> None:
    clock = ToolCall("get_current_time", {"timezone": "Europe/Paris"}, id="call_time")
    research = ToolCall("research_topic", {"topic": "owls"}, id="call_owls")
    realtime.replies = [
        RealtimeReply("Let me look.", (clock,)),
        "It is noon in Paris.",
        RealtimeReply("I will research owls.", (research,)),
        "The owl research is done.",
    ]
    async with RTCTestClient(server.url, jitter_frames=1) as client:
        await greeted(client)
        await ask(client, ear, "What time is it in Paris?", "espeak", tmp_path)
        await client.wait_for(said(client, "noon in Paris"), within=20)
        await nth(client, "bot-stopped-speaking", 3)
        await ask(client, ear, "Please research owls for me.", "espeak", tmp_path)
        await client.wait_for(said(client, "research owls"), within=20)
        # The async tool reports progress for 3 s, then its result makes the bot speak.
        await client.wait_for(said(client, "owl research is done"), within=20)
        pc_id = client.pc_id
    items = realtime.conversations[-1]
    outputs = {i["call_id"]: i["output"] for i in items if i["type"] == "function_call_output"}
    assert set(outputs) == {"call_time", "call_owls"}
    assert '"timezone": "Europe/Paris"' in outputs["call_time"]
    assert "Finished researching owls" in outputs["call_owls"], "the final result only"
    calls = [i["call_id"] for i in items if i["type"] == "function_call"]
    assert calls == ["call_time", "call_owls"], "the model's own call items, kept"
    record = await transcript(server, pc_id)
    answers = [t["text"] for t in record["turns"] if t["role"] == "assistant"]
    assert answers[-4:] == [
        "Let me look.",
        "It is noon in Paris.",
        "I will research owls.",
        "The owl research is done.",
    ]


async def test_a_model_that_drops_the_socket_mid_answer_keeps_the_call(
    server: ServerProcess, realtime: RealtimeScript, ear: ClipEar, tmp_path: Path
) -> None:
    realtime.replies = [RealtimeReply(STORY, drop_after=8), "I am back."]
    async with RTCTestClient(server.url, jitter_frames=1) as client:
        await greeted(client)
        await ask(client, ear, "Tell me a story.", "espeak", tmp_path)
        await client.wait_for(lambda m: m.get("type") == "error", within=20)
        await nth(client, "bot-stopped-speaking", 2)
        await asyncio.sleep(0.5)
        await ask(client, ear, "Are you still there?", "espeak", tmp_path)
        await client.wait_for(said(client, "I am back"), within=20)
        pc_id = client.pc_id
    assert len(realtime.conversations) >= 2, "a new connection"
    rebuilt = [i.get("content", [{}])[0].get("text") for i in realtime.conversations[-1]]
    assert "Tell me a story." in rebuilt, "the context was sent again as text"
    record = await transcript(server, pc_id)
    users = [t["text"] for t in record["turns"] if t["role"] == "user"]
    assert users[-2:] == ["Tell me a story.", "Are you still there?"]


@pytest.fixture(scope="module")
def server_turns(start_server: Callable[..., ServerProcess], models: OpenAIStub) -> ServerProcess:
    settings = models.realtime_settings(
        preload_models="true", greeting="Hello!", realtime_turn_detection="server_vad"
    )
    running = start_server(**settings)
    running.wait_models_ready()
    return running


async def test_with_the_providers_vad_its_turns_are_answered_and_kept_in_the_context(
    server_turns: ServerProcess, realtime: RealtimeScript, ear: ClipEar, tmp_path: Path
) -> None:
    realtime.replies = ["Paris is the capital of France."]
    async with RTCTestClient(server_turns.url, jitter_frames=1) as client:
        await greeted(client)
        await ask(client, ear, "What is the capital of France?", "espeak", tmp_path)
        await client.wait_for(said(client, "capital of France"), within=20)
        await nth(client, "bot-stopped-speaking", 2)
        pc_id = client.pc_id
    first = realtime.of_type("session.update")[0]["session"]  # on connecting, before a word
    assert first["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    assert not realtime.of_type("input_audio_buffer.commit"), "the provider commits"
    created = realtime.of_type("response.create")
    assert [c["response"].get("conversation") for c in created] == ["none"], "the greeting only"
    kinds = [
        (i["role"], "audio" if "audio_ms" in i else "text") for i in realtime.conversations[-1]
    ]
    assert kinds == [("assistant", "text"), ("user", "audio"), ("assistant", "audio")]
    record = await transcript(server_turns, pc_id)
    turns = [(t["role"], t["text"]) for t in record["turns"]]
    assert turns[-2:] == [
        ("user", "What is the capital of France?"),
        ("assistant", "Paris is the capital of France."),
    ]
