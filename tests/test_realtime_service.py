"""The realtime service against the stub's realtime endpoint over a real WebSocket on
127.0.0.1: answers as audio and words, the caller's audio as items, a cut answer
truncated where it was heard, tool results (async ones by the protocol), a dropped socket
and the reconnection that rebuilds the conversation from the context."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pipeline.context.openai_messages import to_openai
from pipeline.realtime.response import RealtimeError
from pipeline.realtime.service import RealtimeConfig, RealtimeLLM
from pipeline.services.circuit import CircuitBreaker
from pipeline.services.llm import AudioDelta, TextDelta, ToolCallRequest, UsageReport
from pipeline.tools.async_protocol import build_final_result_message, build_started_message
from testkit.openai_stub import OpenAIStub, ToolCall, openai_stub_fixture  # noqa: F401
from testkit.openai_stub.realtime import RealtimeReply

STORY_REPLY = "A story that goes on and on, long enough to still be streaming."
SYSTEM = {"role": "system", "content": "You are terse."}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def model(stub: OpenAIStub, dialect: str = "ga") -> RealtimeLLM:
    base = stub.url.replace("http://", "ws://") + "/v1"
    config = RealtimeConfig(
        base_url=base,
        model="stub-rt",
        voice="alloy",
        api_key=stub.api_key,
        dialect=dialect,
        timeout=5,
    )  # type: ignore[arg-type]
    return RealtimeLLM(config, CircuitBreaker("llm", threshold=2, cooldown=30))


async def answer(llm: RealtimeLLM, messages: list[dict[str, Any]], tools: Any = None) -> list[Any]:
    return [chunk async for chunk in llm.stream(messages, tools)]


def spoken(chunks: list[Any]) -> tuple[str, float]:
    text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    audio = sum(len(c.pcm) for c in chunks if isinstance(c, AudioDelta)) / 48000
    return text, audio


async def question_and_backchannel(llm: RealtimeLLM) -> None:
    """A 1 s utterance at t=10 s, then a 0.2 s one at t=12 s (a backchannel)."""
    llm.start()
    await llm._ready()
    llm.append_audio(bytes(48000))  # 1 s at 24 kHz
    llm.commit(10.0)
    llm.append_audio(bytes(9600))
    llm.commit(12.0)


async def test_an_answer_comes_as_words_and_audio_on_the_local_context(
    openai_stub: OpenAIStub,
) -> None:
    openai_stub.realtime.replies = ["It is sunny in Paris today."]
    llm = model(openai_stub)
    try:
        chunks = await answer(llm, [SYSTEM, {"role": "user", "content": "Weather?"}], [WEATHER])
    finally:
        await llm.close()
    text, seconds = spoken(chunks)
    assert text == "It is sunny in Paris today."
    assert seconds == pytest.approx(len(text) * 0.06, abs=0.11)
    assert any(isinstance(c, UsageReport) and c.usage.output_tokens == 20 for c in chunks)
    first, update = [e["session"] for e in openai_stub.realtime.of_type("session.update")]
    assert first["audio"]["output"]["voice"] == "alloy", "the voice from the first word"
    assert first["audio"]["input"]["turn_detection"] is None, "no provider VAD, ever"
    assert update["instructions"] == "You are terse."
    assert "voice" not in update["audio"]["output"], "never changed once set"
    assert update["audio"]["input"]["turn_detection"] is None, "Parley keeps the turns"
    assert update["tools"][0]["name"] == "get_weather"
    user = openai_stub.realtime.conversations[0][0]
    assert user["role"] == "user" and user["content"][0]["text"] == "Weather?"
    assert openai_stub.realtime.headers[0]["authorization"] == f"Bearer {openai_stub.api_key}"


async def test_the_callers_audio_is_the_user_item_and_a_discarded_one_is_deleted(
    openai_stub: OpenAIStub,
) -> None:
    llm = model(openai_stub)
    try:
        await question_and_backchannel(llm)
        assert await openai_stub.wait_for(lambda: len(llm.mirror.pending_user) == 2)
        llm.discard(12.1)
        chunks = await answer(llm, [SYSTEM, {"role": "user", "content": "what I said"}])
    finally:
        await llm.close()
    assert spoken(chunks)[0]
    items = openai_stub.realtime.conversations[0]
    users = [i for i in items if i["role"] == "user"]
    assert len(users) == 1 and users[0]["audio_ms"] == pytest.approx(1000)
    assert not openai_stub.realtime.of_type("conversation.item.create"), "bound, not copied"


async def test_a_cut_answer_is_truncated_where_the_user_stopped_hearing_it(
    openai_stub: OpenAIStub,
) -> None:
    openai_stub.realtime.replies = ["This answer is long enough to be cut somewhere."]
    llm = model(openai_stub)
    messages = [SYSTEM, {"role": "user", "content": "Tell me."}]
    try:
        stream = llm.stream(messages)
        async for _ in stream:
            pass
        llm.heard(stream, 1.234)
        messages.append({"role": "assistant", "content": "This answer is long"})
        await answer(llm, [*messages, {"role": "user", "content": "Go on."}])
    finally:
        await llm.close()
    truncate = openai_stub.realtime.of_type("conversation.item.truncate")
    assert [t["audio_end_ms"] for t in truncate] == [1234]
    bot = [i for i in openai_stub.realtime.conversations[0] if i["role"] == "assistant"]
    assert bot[0]["audio_end_ms"] == 1234


async def test_tool_calls_and_an_async_tools_final_result_become_outputs(
    openai_stub: OpenAIStub,
) -> None:
    call = ToolCall("get_weather", {"city": "Paris"}, id="call_1")
    slow = ToolCall("book", {}, id="call_2")
    openai_stub.realtime.replies = [RealtimeReply("Let me check.", (call, slow)), "Done."]
    llm = model(openai_stub)
    try:
        chunks = await answer(llm, [SYSTEM, {"role": "user", "content": "Weather?"}], [WEATHER])
        calls = [c for c in chunks if isinstance(c, ToolCallRequest)]
        assert [(c.name, c.arguments) for c in calls] == [
            ("get_weather", {"city": "Paris"}),
            ("book", {}),
        ]
        tool_calls = [
            {
                "id": c.tool_call_id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in calls
        ]
        started, final = to_openai(
            [build_started_message("call_2"), build_final_result_message("call_2", '{"ok": true}')]
        )
        context = [
            SYSTEM,
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": tool_calls},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'},
            started,
            final,
        ]
        await answer(llm, context, [WEATHER])
    finally:
        await llm.close()
    outputs = [
        i for i in openai_stub.realtime.conversations[0] if i["type"] == "function_call_output"
    ]
    assert [(o["call_id"], o["output"]) for o in outputs] == [
        ("call_1", '{"sky": "sunny"}'),
        ("call_2", '{"ok": true}'),
    ]
    created = openai_stub.realtime.of_type("conversation.item.create")
    assert not any(e["item"]["type"] == "function_call" for e in created), "bound to its own"


async def test_a_dropped_socket_fails_the_answer_and_the_next_one_reconnects(
    openai_stub: OpenAIStub,
) -> None:
    openai_stub.realtime.replies = [
        RealtimeReply("Cut off in the middle.", drop_after=2),
        "Back again.",
    ]
    llm = model(openai_stub)
    messages = [SYSTEM, {"role": "user", "content": "Hello?"}]
    try:
        with pytest.raises(RealtimeError, match="closed"):
            await answer(llm, messages)
        messages.append({"role": "assistant", "content": "Cut off"})
        chunks = await answer(llm, [*messages, {"role": "user", "content": "Still there?"}])
    finally:
        await llm.close()
    assert spoken(chunks)[0] == "Back again."
    second = openai_stub.realtime.conversations[1]
    texts = [i["content"][0]["text"] for i in second if i.get("content")]
    assert texts == ["Hello?", "Cut off", "Still there?"], "rebuilt from the context"


async def test_the_beta_dialect_is_spoken_and_read(openai_stub: OpenAIStub) -> None:
    openai_stub.realtime.dialect = "beta"
    openai_stub.realtime.replies = ["Beta voice here."]
    llm = model(openai_stub, dialect="beta")
    try:
        chunks = await answer(llm, [SYSTEM, {"role": "user", "content": "Hi"}])
    finally:
        await llm.close()
    assert spoken(chunks)[0] == "Beta voice here." and spoken(chunks)[1] > 0.5
    session = openai_stub.realtime.of_type("session.update")[-1]["session"]
    assert session["input_audio_format"] == "pcm16" and session["turn_detection"] is None
    assert openai_stub.realtime.headers[0]["openai-beta"] == "realtime=v1"


async def test_an_endpoint_that_is_down_opens_the_breaker(openai_stub: OpenAIStub) -> None:
    llm = model(openai_stub)
    openai_stub.stop()
    try:
        for _ in range(2):
            with pytest.raises(RealtimeError, match="cannot reach"):
                await answer(llm, [SYSTEM, {"role": "user", "content": "Hi"}])
        with pytest.raises(Exception, match="unavailable"):
            await answer(llm, [SYSTEM, {"role": "user", "content": "Hi"}])
    finally:
        openai_stub.start()
        await llm.close()


async def test_speech_discarded_before_its_commit_is_confirmed_still_goes(
    openai_stub: OpenAIStub,
) -> None:
    llm = model(openai_stub)
    try:
        await question_and_backchannel(llm)
        llm.discard(12.05)  # judged a backchannel at once: its commit not back yet
        await answer(llm, [SYSTEM, {"role": "user", "content": "what I said"}])
    finally:
        await llm.close()
    users = [i for i in openai_stub.realtime.conversations[0] if i["role"] == "user"]
    assert [u["audio_ms"] for u in users] == [pytest.approx(1000)]


async def test_refused_requests_end_at_once_and_mislead_nothing(openai_stub: OpenAIStub) -> None:
    openai_stub.realtime.replies = [STORY_REPLY, "Second."]
    openai_stub.realtime.chunk_interval = 0.1
    llm = model(openai_stub)
    try:
        await question_and_backchannel(llm)
        llm.commit(13.0)  # nothing appended since: refused, no item
        llm.append_audio(bytes(24000))
        llm.commit(14.0)
        assert await openai_stub.wait_for(lambda: len(llm.mirror.pending_user) == 3)
        llm.discard(14.0)  # the last one, not the refused one's neighbour
        first = llm.stream([SYSTEM, {"role": "user", "content": "Long one."}])
        await first.__anext__()
        # The provider's refusal, not the timeout ("no answer from ..."), ends it.
        with pytest.raises(RealtimeError, match="active response"):
            await answer(llm, [SYSTEM, {"role": "user", "content": "Another."}])
        await first.aclose()
    finally:
        await llm.close()
    users = [i["audio_ms"] for i in openai_stub.realtime.conversations[0] if i["role"] == "user"]
    assert users == [pytest.approx(1000), pytest.approx(200)]


async def test_an_answer_cut_while_it_streams_is_truncated_even_if_all_that_came_was_heard(
    openai_stub: OpenAIStub,
) -> None:
    openai_stub.realtime.replies = [STORY_REPLY]
    openai_stub.realtime.chunk_interval = 0.1  # an output that plays each chunk as it comes
    llm = model(openai_stub)
    try:
        stream = llm.stream([SYSTEM, {"role": "user", "content": "Tell me."}])
        received = 0
        async for chunk in stream:
            if isinstance(chunk, AudioDelta):
                received += len(chunk.pcm)
                if received >= 4 * 4800:
                    break
        await stream.aclose()
        llm.heard(stream, received / 48000)  # everything that came had played
        assert await openai_stub.wait_for(
            lambda: bool(openai_stub.realtime.of_type("conversation.item.truncate"))
        )
    finally:
        await llm.close()
    cut = openai_stub.realtime.of_type("conversation.item.truncate")
    assert [c["audio_end_ms"] for c in cut] == [received // 48]
    assert openai_stub.realtime.of_type("response.cancel")
