"""An LLM's reasoning: streamed as thought events, shown to clients, never spoken, kept in
the context only when ``PARLEY_LLM_THOUGHTS_IN_CONTEXT`` says so, counted in metrics.

The stub streams reasoning deltas (``reasoning_content`` or ``reasoning``), then the
answer. Three levels: the OpenAI-compatible service alone; a whole conversation in one
process (the paced track, the services against the stub, the RTVI observer); a real
server, whose client gets the thought messages and whose /metrics count them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from pipeline.events import (
    BotResponseEnded,
    BotStoppedSpeaking,
    Emitter,
    LLMThoughtEnded,
    LLMThoughtStarted,
    LLMThoughtText,
    Metric,
)
from pipeline.messages import AssistantMessage
from pipeline.services.llm import ReasoningDelta, TextDelta, UsageReport
from pipeline.services.openai_llm import OpenAILLM
from server.rtvi.events import RTVIEvents
from testkit.conversation_call import Call
from testkit.exposition import parse
from testkit.openai_stub import ChatReply, OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess
from testkit.waits import until

THOUGHT = "The user asks about the weather. Oslo is sunny today, so I say so briefly."
ANSWER = "It is sunny in Oslo today."
SPEECH = "/v1/audio/speech"
THOUGHT_TOKENS = len(re.findall(r"\s*\S+\s*", THOUGHT))  # the stub's chunks, one token each


def thought_messages(sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages = [m["data"] for m in sent if m["type"] == "server-message"]
    return [m for m in messages if str(m.get("type", "")).startswith("bot-llm-thought")]


def check_thought_messages(sent: list[dict[str, Any]]) -> None:
    """The client saw the thought, whole, before the answer; and nowhere else."""
    thought = thought_messages(sent)
    assert thought[0] == {"type": "bot-llm-thought-started"}
    assert thought[-1] == {"type": "bot-llm-thought-stopped"}
    assert "".join(m["text"] for m in thought[1:-1]) == THOUGHT
    types = [m["type"] for m in sent]
    stopped = next(i for i, m in enumerate(sent) if m.get("data") == thought[-1])
    assert stopped < types.index("bot-llm-text"), "the thought ends before the answer"
    llm_text = "".join(m["data"]["text"] for m in sent if m["type"] == "bot-llm-text")
    assert llm_text == ANSWER, "no reasoning in bot-llm-text"
    output = " ".join(m["data"]["text"] for m in sent if m["type"] == "bot-output")
    assert output == ANSWER, "no reasoning in bot-output"


# -- the service ------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_deltas_stream_as_reasoning_not_text(stub: OpenAIStub, field: str) -> None:
    stub.reset()
    stub.script_chat(ChatReply(ANSWER, reasoning=THOUGHT, reasoning_field=field))
    llm = OpenAILLM("stub-llm", base_url=stub.base_url, api_key=stub.api_key)
    try:
        stream = llm.stream([{"role": "user", "content": "Weather?"}])
        chunks = [chunk async for chunk in stream]
    finally:
        await llm.aclose()
    kinds = [type(c) for c in chunks]
    assert kinds.index(TextDelta) > max(i for i, k in enumerate(kinds) if k is ReasoningDelta)
    assert "".join(c.text for c in chunks if isinstance(c, ReasoningDelta)) == THOUGHT
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == ANSWER
    usage = next(c for c in chunks if isinstance(c, UsageReport))
    assert usage.reasoning_tokens == THOUGHT_TOKENS
    assert stream.ttfb is not None  # type: ignore[attr-defined]


# -- a conversation --------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [False, True])
async def test_a_thought_is_shown_never_spoken_and_kept_per_the_setting(
    stub: OpenAIStub, keep: bool
) -> None:
    stub.reset()
    stub.script_chat(ChatReply(ANSWER, reasoning=THOUGHT), "Anything else?")
    sent: list[dict[str, Any]] = []
    metrics: list[Metric] = []
    async with Call(stub) as call:
        call.llm.thoughts_in_context = keep
        RTVIEvents(sent.append).subscribe(call.conv.events)
        ended: list[BotResponseEnded] = []
        call.conv.events.on(BotResponseEnded, ended.append)
        call.conv.events.on(Metric, metrics.append)
        call.conv.user.add_text("What is the weather in Oslo?")
        await call.until(BotStoppedSpeaking)
        await until(lambda: bool(ended))
        first_turn = list(sent)
        call.conv.user.add_text("Thanks.")
        await until(lambda: len(call.chats()) == 2)
    # Never spoken: the TTS got the answer only.
    assert stub.requests(SPEECH)[0].body["input"] == ANSWER
    assert not any("weather" in r.body["input"] for r in stub.requests(SPEECH))
    check_thought_messages(first_turn)
    # Kept in the context (before the answer) only when the LLM service says so.
    assistant = [m for m in call.context.messages if isinstance(m, AssistantMessage)]
    thoughts = [c.content for m in assistant for c in m.thinking()]
    assert thoughts == ([THOUGHT] if keep else [])
    answer = next(i for i, m in enumerate(assistant) if m.text_content() == ANSWER)
    if keep:
        assert assistant[answer - 1].thinking()[0].content == THOUGHT
    # Never sent back to the endpoint, kept or not.
    assert "sunny today, so I say" not in json.dumps(call.chats()[1].body["messages"])
    by_kind = {m.kind: m.value for m in metrics if m.service == "llm"}
    assert by_kind["thought_characters"] == len(THOUGHT)
    assert by_kind["reasoning_tokens"] == THOUGHT_TOKENS


def test_the_client_can_be_spared_the_thought() -> None:
    events, sent = Emitter(), []
    RTVIEvents(sent.append, thoughts=False).subscribe(events)
    for event in (LLMThoughtStarted(), LLMThoughtText("hmm"), LLMThoughtEnded()):
        events.emit(event)
    events.emit(Metric("llm", "thought_characters", 3))
    assert sent == [], "no thought messages, and reasoning metrics are not RTVI metrics"


# -- a real server ------------------------------------------------------------------------------


@pytest.mark.e2e
async def test_a_server_shows_the_thought_and_counts_it(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub
) -> None:
    stub.reset()
    server = start_server(**stub.server_settings(llm_thoughts_in_context="true"))
    stub.script_chat(ChatReply(ANSWER, reasoning=THOUGHT))
    async with RTCTestClient(server.url) as client:
        client.send_rtvi("send-text", {"content": "What is the weather in Oslo?"})
        await client.wait_for(lambda m: m.get("type") == "bot-stopped-speaking", within=15)
        await client.wait_for(lambda m: m.get("type") == "bot-output", within=5)
    check_thought_messages(client.messages)
    async with httpx.AsyncClient() as http:
        metrics = parse((await http.get(f"{server.url}/metrics")).text)
    assert metrics.value("parley_llm_thought_characters_total") == len(THOUGHT)
    assert metrics.value("parley_llm_reasoning_tokens_total") == THOUGHT_TOKENS
    spoken = " ".join(r.body["input"] for r in stub.requests(SPEECH))
    assert spoken == ANSWER
