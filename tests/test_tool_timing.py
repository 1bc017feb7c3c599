"""Tool calls start as soon as the LLM response has them, not after the spoken preamble.

A reply like "Let me look that up for you." plus a tool call: the call runs while the
preamble plays, so its latency does not include the preamble. A barge-in during the
preamble cancels an ordinary call; an async tool (``cancel_on_interruption=False``) goes
on and its result reaches the context and the LLM through the async-tool protocol.

The conversation is real (``testkit/conversation_call.py``: the paced track read in real
time, the OpenAI-compatible services against the stub), with a real tool runner.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from pipeline.events import BotStartedSpeaking, BotStoppedSpeaking, Event, FunctionCallsStarted
from pipeline.messages import AssistantMessage
from pipeline.tools import async_protocol as async_tools
from pipeline.tools.registry import ToolCall, ToolRegistry
from pipeline.tools.runner import ToolRunner
from testkit.conversation_call import Call
from testkit.openai_stub import TTS_RATE, ChatReply, OpenAIStub
from testkit.openai_stub import ToolCall as ScriptedCall
from testkit.waits import until

# About 1.2 s of stub speech: long enough that a call started after it is clearly late.
PREAMBLE = "Let me look that up for you, it will only take a moment while I check the records."


@pytest.fixture
async def stub() -> AsyncIterator[OpenAIStub]:
    with OpenAIStub() as running:
        running.config.tts_seconds_per_char = 0.015
        yield running


class Tools:
    """A cancellable lookup and an async research tool; records when each started and
    whether it was cancelled."""

    def __init__(self, lookup_seconds: float = 0.05, research_seconds: float = 0.3) -> None:
        self.registry = ToolRegistry()
        self.started: dict[str, float] = {}
        self.cancelled: list[str] = []
        registry = self.registry

        @registry.tool()
        async def lookup(city: str, *, call: ToolCall) -> str:
            """Look up the weather."""
            return await self._run("lookup", lookup_seconds, f"sunny in {city}")

        @registry.tool(cancel_on_interruption=False)
        async def research(topic: str, *, call: ToolCall) -> str:
            """Research a topic (slow)."""
            return await self._run("research", research_seconds, f"notes on {topic}")

    async def _run(self, name: str, seconds: float, result: str) -> str:
        self.started[name] = time.monotonic()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.cancelled.append(name)
            raise
        return result


def wire(call: Call, tools: Tools) -> ToolRunner:
    call.context.set_tools(tools.registry.openai_tools())
    runner = ToolRunner(tools.registry, call.conv.feed)
    runner.attach(call.conv.events)
    for kind in (FunctionCallsStarted,):
        call.conv.events.on(kind, call.seen.append)
    return runner


def first(call: Call, kind: type[Event]) -> Event:
    return next(e for e in call.seen if isinstance(e, kind))


def said(call: Call) -> list[str]:
    """The assistant's spoken messages in the context, in order."""
    texts = [m.text_content() for m in call.context.messages if isinstance(m, AssistantMessage)]
    return [text for text in texts if text]


async def test_a_tool_call_starts_while_the_preamble_plays(stub: OpenAIStub) -> None:
    stub.script_chat(
        ChatReply(PREAMBLE, tool_calls=(ScriptedCall("lookup", {"city": "Oslo"}),)),
        "It is sunny in Oslo.",
    )
    tools = Tools()
    async with Call(stub) as call:
        runner = wire(call, tools)
        call.conv.user.add_text("What is the weather in Oslo?")
        await call.until(BotStoppedSpeaking, within=8.0)
        # When the preamble's audio finished playing: its first sample went out at
        # BotStartedSpeaking, and it lasts this long.
        preamble = stub.tts_samples(PREAMBLE) / TTS_RATE
        assert preamble > 1.0
        played_out = first(call, BotStartedSpeaking).t + preamble  # type: ignore[attr-defined]
        assert "lookup" in tools.started, "the call had not started when the preamble ended"
        late = tools.started["lookup"] - played_out
        assert late < -preamble / 2, f"the call started {late:+.2f} s from the preamble's end"
        # The result (in long before the preamble ended) waits for it, then is answered.
        await until(lambda: len(call.chats()) == 2)
        await until(lambda: said(call) == [PREAMBLE, "It is sunny in Oslo."])
        await runner.close()
    # The context reads in the order things happened: the preamble, then the call.
    wire_messages = call.chats()[1].body["messages"]
    roles = [(m["role"], bool(m.get("tool_calls"))) for m in wire_messages[-3:]]
    assert roles == [("assistant", False), ("assistant", True), ("tool", False)]
    assert wire_messages[-3]["content"] == PREAMBLE
    assert wire_messages[-1]["content"] == '"sunny in Oslo"'


async def test_a_barge_in_during_the_preamble_cancels_calls_but_async_tools_report(
    stub: OpenAIStub,
) -> None:
    stub.script_chat(
        ChatReply(
            PREAMBLE,
            tool_calls=(
                ScriptedCall("lookup", {"city": "Oslo"}, id="call_lookup"),
                ScriptedCall("research", {"topic": "fjords"}, id="call_research"),
            ),
        ),
        "Here is what I found about fjords.",
    )
    tools = Tools(lookup_seconds=5.0, research_seconds=0.5)
    async with Call(stub) as call:
        runner = wire(call, tools)
        call.conv.user.add_text("Check the weather and research fjords.")
        await call.until(BotStartedSpeaking)
        await asyncio.sleep(0.2)
        assert set(tools.started) == {"lookup", "research"}, "the calls wait for the preamble"
        call.conv.interrupt()
        await asyncio.sleep(0.05)
        assert tools.cancelled == ["lookup"]
        lookup = call.context.find_tool_message("call_lookup")
        assert lookup is not None and lookup.content == "CANCELLED"
        assert runner.running == {"call_research"}
        # The async tool goes on; its final result reaches the context and the LLM runs.
        await until(lambda: len(call.chats()) == 2)
        await runner.close()
    final = [async_tools.parse_message(m) for m in call.chats()[1].body["messages"]]
    finished = [p for p in final if p is not None and p.kind == "final"]
    assert len(finished) == 1 and finished[0].tool_call_id == "call_research"
    assert "notes on fjords" in finished[0].result
    assert tools.cancelled == ["lookup"], "the async tool was not cancelled"
    said = [m for m in call.context.messages if isinstance(m, AssistantMessage) and m.interrupted]
    assert len(said) == 1 and PREAMBLE.startswith(said[0].text_content())
