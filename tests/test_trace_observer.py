"""OpenTelemetry traces of a real call, received by a real OTLP/HTTP receiver.

A server process with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at the receiver, the models
at the OpenAI-compatible stub and an agent with one tool: a caller asks a question over the
plain-PCM WebSocket, the LLM calls the tool and answers, the caller hangs up. The spans are
then checked one by one: one call, its user and bot turns, the end-of-turn decision, the
STT, the LLM (time to first byte, tokens), the tool call and the TTS; no words of the
conversation in them unless ``PARLEY_TRACE_TEXT`` allows it. Then a call whose answer
is interrupted, followed by a typed question the LLM fails on: every span still ends, the
interrupted answer is marked, the failed LLM call is an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.openai_stub import ChatReply, Fault, OpenAIStub, ToolCall
from testkit.otlp_receiver import OTLPReceiver, ReceivedSpan, otlp_receiver
from testkit.server_process import ServerProcess
from testkit.socket_callers import PcmCaller
from testkit.speech import espeak

pytestmark = pytest.mark.e2e

AGENT = Path(__file__).parent / "agent_files" / "weather_desk.py"
QUESTION = "What is the weather in Paris?"
PREAMBLE = "Let me look that up."
ANSWER = "It is sunny in Paris today."
SPOKEN_WORDS = ("weather in", "Paris", "sunny", "look that up")  # not the tool's name


@pytest.fixture(scope="module")
def receiver() -> Iterator[OTLPReceiver]:
    with otlp_receiver() as running:
        yield running


def start(stub: OpenAIStub, receiver: OTLPReceiver, tmp: Path, trace_text: bool) -> ServerProcess:
    settings = stub.server_settings(
        agent=str(AGENT), preload_models="true", trace_text=str(trace_text).lower()
    )
    env = {f"PARLEY_{k.upper()}": v for k, v in settings.items()}
    env |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id={tmp.name}",
    }
    server = ServerProcess(env, tmp / "server.log")
    server.wait_models_ready(60)
    return server


def new_spans(receiver: OTLPReceiver, name: str, earlier: set[str]) -> list[ReceivedSpan]:
    """The spans named ``name`` of traces not in ``earlier`` (the calls before)."""
    return receiver.spans(lambda s: s.name == name and s.trace_id not in earlier)


async def one_call(stub: OpenAIStub, receiver: OTLPReceiver, server: ServerProcess) -> str:
    """A spoken question answered after a tool call; the call's trace id."""
    earlier = {s.trace_id for s in receiver.spans()}
    stub.reset()
    stub.config.transcript = QUESTION
    weather = ToolCall("get_weather", {"city": "Paris"}, id="call_weather")
    stub.script_chat(ChatReply(text=PREAMBLE, tool_calls=(weather,)), ANSWER)
    url = server.url.replace("http://", "ws://") + "/ws"
    async with PcmCaller(url) as caller:
        await caller.ready()
        await caller.wait_for(lambda: "bot-ready" in caller.event_types(), within=10)
        caller.say(espeak(QUESTION))
        answered = lambda: len(new_spans(receiver, "bot_turn", earlier)) >= 2  # noqa: E731
        await caller.wait_for(answered, within=40)
    # Hung up: the call span ends as the session closes.
    assert receiver.wait_for(lambda: bool(new_spans(receiver, "call", earlier)), 10)
    (call,) = new_spans(receiver, "call", earlier)
    return call.trace_id


def children(spans: list[ReceivedSpan], parent: ReceivedSpan, name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.parent_id == parent.span_id and s.name == name]


def inside(child: ReceivedSpan, parent: ReceivedSpan, slack_ns: int = 5_000_000) -> bool:
    return parent.start - slack_ns <= child.start <= child.end <= parent.end + slack_ns


@pytest.mark.timeout(150)
async def test_a_call_is_traced_span_by_span_without_its_words(
    stub: OpenAIStub, receiver: OTLPReceiver, tmp_path: Path
) -> None:
    server = start(stub, receiver, tmp_path, trace_text=False)
    try:
        trace_id = await one_call(stub, receiver, server)
    finally:
        server.stop()
    spans = receiver.spans(lambda s: s.trace_id == trace_id)
    (call,) = [s for s in spans if s.name == "call"]
    assert call.parent_id == "" and call.kind == 2  # SERVER
    assert call.resource["service.name"] == "parley"
    assert call.scope == "parley"
    assert call.attributes["parley.transport"] == "websocket"
    assert call.attributes["parley.close_reason"]
    assert call.attributes["parley.user_turns"] == 1 and call.attributes["parley.bot_turns"] == 2

    (user_turn,) = children(spans, call, "user_turn")
    assert inside(user_turn, call)
    assert user_turn.attributes["parley.turn.start_strategy"]
    assert user_turn.attributes["parley.user.characters"] == len(QUESTION)
    (decision,) = children(spans, user_turn, "end_of_turn")
    assert decision.attributes["parley.turn.stop_strategy"]
    assert decision.attributes["parley.turn.wait_ms"] >= 0
    assert decision.end <= user_turn.end + 5_000_000
    (stt,) = children(spans, user_turn, "stt")
    # The STT's time after the stop: 0 when its early pass (at the pause) was in by then.
    assert stt.attributes["parley.processing_ms"] >= 0
    assert stt.attributes["parley.stt.characters"] == len(QUESTION)

    asking, answering = sorted(children(spans, call, "bot_turn"), key=lambda s: s.start)
    assert user_turn.end <= asking.start < asking.end <= answering.start
    assert asking.attributes["parley.voice_to_voice_ms"] > 0
    assert "bot_started_speaking" in asking.events
    for turn, reason in ((asking, "tool_calls"), (answering, "stop")):
        (llm,) = children(spans, turn, "llm")
        assert inside(llm, turn)
        assert llm.attributes["parley.ttfb_ms"] > 0
        assert llm.attributes["gen_ai.request.model"] == "gpt-4o-mini"
        assert llm.attributes["gen_ai.usage.input_tokens"] > 0
        assert llm.attributes["gen_ai.usage.output_tokens"] > 0
        assert llm.attributes["gen_ai.response.finish_reasons"] == (reason,)
        (tts,) = children(spans, turn, "tts")
        assert llm.start <= tts.start and inside(tts, turn)
        assert tts.attributes["parley.ttfb_ms"] > 0
        assert tts.attributes["parley.tts.characters"] > 0
    (tool,) = children(spans, asking, "tool_call")
    assert tool.attributes["gen_ai.tool.name"] == "get_weather"
    assert tool.attributes["gen_ai.tool.call.id"] == "call_weather"
    assert not children(spans, answering, "tool_call")
    assert answering.attributes["parley.bot.characters"] == len(ANSWER)

    assert {s.trace_id for s in spans} == {trace_id}
    assert all(s.status_code != 2 for s in spans), "nothing failed"
    said = [v for s in spans for v in s.attributes.values() if isinstance(v, str)]
    assert not [v for v in said if any(w.lower() in v.lower() for w in SPOKEN_WORDS)]
    assert not [k for s in spans for k in s.attributes if k.endswith((".text", "arguments"))]

    # The metrics beside the traces, exported for the last time as the server stopped.
    instance = {"service.instance.id": tmp_path.name}
    (calls,) = receiver.points("parley.calls", **instance)[-1:]
    assert calls.value == 1 and calls.attributes == {"transport": "websocket"}
    turns = {p.attributes["side"]: p.value for p in receiver.points("parley.turns", **instance)}
    assert turns == {"user": 1, "bot": 2}
    (latency,) = receiver.points("parley.voice_to_voice", **instance)[-1:]
    assert latency.count == 1 and 0 < latency.value < 10


@pytest.mark.timeout(150)
async def test_with_trace_text_the_words_are_in_the_spans(
    stub: OpenAIStub, receiver: OTLPReceiver, tmp_path: Path
) -> None:
    server = start(stub, receiver, tmp_path, trace_text=True)
    try:
        trace_id = await one_call(stub, receiver, server)
    finally:
        server.stop()
    spans = receiver.spans(lambda s: s.trace_id == trace_id)
    (call,) = [s for s in spans if s.name == "call"]
    (user_turn,) = children(spans, call, "user_turn")
    assert user_turn.attributes["parley.user.text"] == QUESTION
    (stt,) = children(spans, user_turn, "stt")
    assert stt.attributes["parley.stt.text"] == QUESTION
    asking, answering = sorted(children(spans, call, "bot_turn"), key=lambda s: s.start)
    assert asking.attributes["parley.bot.text"] == PREAMBLE
    assert answering.attributes["parley.bot.text"] == ANSWER
    (tool,) = children(spans, asking, "tool_call")
    assert "Paris" in tool.attributes["gen_ai.tool.call.arguments"]
    assert "sunny" in tool.attributes["gen_ai.tool.call.result"]


STORY = "Once upon a time there was a small robot. It lived in a lighthouse by the sea."
BARGE_IN = "Wait, I have another question."


@pytest.mark.timeout(150)
async def test_an_interrupted_answer_and_a_failed_one_end_their_spans_and_are_marked(
    stub: OpenAIStub, receiver: OTLPReceiver, tmp_path: Path
) -> None:
    server = start(stub, receiver, tmp_path, trace_text=False)
    earlier = {s.trace_id for s in receiver.spans()}
    stub.reset()
    stub.config.tts_seconds_per_char = 0.05  # the story: 4 s of audio
    stub.script_stt(QUESTION, BARGE_IN)
    stub.script_chat(STORY, "Of course, go ahead.", Fault.http(500))
    try:
        url = server.url.replace("http://", "ws://") + "/ws"
        async with PcmCaller(url) as caller:
            await caller.ready()
            await caller.wait_for(lambda: "bot-ready" in caller.event_types(), within=10)
            asked = caller.say(espeak(QUESTION))
            await caller.wait_for(lambda: caller.bot_audio_after(asked + 1.0), within=20)
            await asyncio.sleep(0.8)
            caller.say(espeak(BARGE_IN))
            answered = lambda: len(new_spans(receiver, "bot_turn", earlier)) >= 2  # noqa: E731
            await caller.wait_for(answered, within=30)
            # A typed question, and the LLM fails on it.
            await caller.send_json({"label": "rtvi-ai", "type": "send-text", "id": "t1",
                                    "data": {"content": "And tomorrow?"}})  # fmt: skip
            failed = lambda: len(new_spans(receiver, "bot_turn", earlier)) >= 3  # noqa: E731
            await caller.wait_for(failed, within=20)
        assert receiver.wait_for(lambda: bool(new_spans(receiver, "call", earlier)), 10)
    finally:
        server.stop()
    (call,) = new_spans(receiver, "call", earlier)
    spans = receiver.spans(lambda s: s.trace_id == call.trace_id)
    assert call.attributes["parley.interruptions"] == 1
    assert call.attributes["parley.user_turns"] == 3
    story, after, failed = sorted(children(spans, call, "bot_turn"), key=lambda s: s.start)
    assert story.attributes["parley.interrupted"] is True
    assert "parley.interrupted" not in after.attributes
    assert story.end <= after.start
    assert story.attributes["parley.bot.characters"] < len(STORY), "only what was heard"
    (tts,) = children(spans, story, "tts")
    assert inside(tts, story)
    first, second, typed = sorted(children(spans, call, "user_turn"), key=lambda s: s.start)
    assert first.end <= story.start and second.start < story.end, "the barge-in overlaps"
    assert typed.attributes["parley.turn.typed"] is True
    assert typed.attributes["parley.user.characters"] == len("And tomorrow?")
    assert not children(spans, typed, "stt") and not children(spans, typed, "end_of_turn")
    (llm,) = children(spans, failed, "llm")
    assert llm.status_code == 2 and "service_error" in llm.events  # ERROR
    assert llm.attributes["gen_ai.response.finish_reasons"] == ("error",)
    assert [s for s in spans if s.status_code == 2] == [llm]
    ids = {s.span_id for s in spans}
    assert all(s.parent_id in ids for s in spans if s is not call), "no span lost its parent"
