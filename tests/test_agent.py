"""pipeline/tools/agent.py, pipeline/tools/call_context.py and pipeline/tools/call_tools.py: an
agent's tools as the LLM sees them, run by the real tool runner (async on the loop, plain
``def`` in a thread, the call's context given to those that ask), its hooks, handoffs, and
the setting defaults it gives."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from pipeline.events import FunctionCall, FunctionCallResult, FunctionCallsStarted
from pipeline.tools.agent import Agent, call_user_function, handoff_target
from pipeline.tools.call_context import CallContext
from pipeline.tools.call_tools import CallTools
from pipeline.tools.registry import ToolRegistry, ToolSpec
from pipeline.tools.runner import ToolRunner


class Controls:
    """Records what the agent asked of its call."""

    def __init__(self) -> None:
        self.done: list[tuple[str, Any]] = []
        self.threads: list[int] = []

    def _note(self, what: str, value: Any) -> None:
        self.threads.append(threading.get_ident())
        self.done.append((what, value))

    def say(self, text: str) -> None:
        self._note("say", text)

    def end_call(self, reason: str, goodbye: str | None) -> None:
        self._note("end", (reason, goodbye))

    def send_ui_command(self, command: str, data: Any) -> None:
        self._note("ui", (command, data))

    def send_server_message(self, data: Any) -> None:
        self._note("server-message", data)

    def handoff(self, agent: Agent) -> None:
        self._note("handoff", agent.name)


def bike_shop() -> Agent:
    agent = Agent(instructions="You are the front desk of a bike shop.", greeting="Hi!")

    @agent.tool
    async def get_order_status(order_id: str) -> dict[str, Any]:
        """Look up an order.

        Args:
            order_id: The order number the customer reads out.
        """
        return {"order_id": order_id, "status": "shipped"}

    return agent


async def run_tool(
    tools: ToolRegistry, name: str, arguments: dict[str, Any], context: CallContext | None
) -> FunctionCallResult:
    results: list[FunctionCallResult] = []
    done = asyncio.Event()

    def feed(event: Any) -> None:
        if isinstance(event, FunctionCallResult) and event.is_final:
            results.append(event)
            done.set()

    runner = ToolRunner(tools, feed, context)
    runner.handle(FunctionCallsStarted((FunctionCall("c1", name, arguments),)))
    await asyncio.wait_for(done.wait(), 5)
    await runner.close()
    return results[0]


def test_the_minimal_agent_offers_its_tool_with_the_docstring() -> None:
    agent = bike_shop()
    (tool,) = agent.tools.openai_tools()
    function = tool["function"]
    assert function["name"] == "get_order_status"
    assert function["description"] == "Look up an order."
    order_id = function["parameters"]["properties"]["order_id"]
    assert order_id == {"type": "string", "description": "The order number the customer reads out."}
    assert function["parameters"]["required"] == ["order_id"]


async def test_an_agent_tool_runs_and_its_return_value_is_the_result() -> None:
    result = await run_tool(bike_shop().tools, "get_order_status", {"order_id": "A7"}, None)
    assert result.result == {"order_id": "A7", "status": "shipped"}


async def test_a_plain_def_tool_runs_in_a_thread_and_its_context_acts_on_the_loop() -> None:
    agent = Agent()
    seen: dict[str, Any] = {}

    @agent.tool(name="note_it")
    def note(text: str, ctx: CallContext) -> str:
        """Write a note down.

        Args:
            text: What to write.
        """
        seen["thread"] = threading.get_ident()
        ctx.state["notes"] = [*ctx.state.get("notes", []), text]
        ctx.say(f"Noted: {text}")
        return "ok"

    assert "ctx" not in agent.tools.openai_tools()[0]["function"]["parameters"]["properties"]
    controls = Controls()
    context = CallContext("call-1", controls, agent=agent)
    result = await run_tool(agent.tools, "note_it", {"text": "milk"}, context)
    await asyncio.sleep(0)  # the say hops back to the loop
    assert result.result == "ok"
    assert seen["thread"] != threading.get_ident()
    assert context.state == {"notes": ["milk"]}
    assert controls.done == [("say", "Noted: milk")]
    assert controls.threads == [threading.get_ident()]


async def test_a_tool_that_raises_gives_the_llm_an_error_result() -> None:
    agent = Agent()

    @agent.tool
    def broken(order_id: str) -> str:
        """Always fails.

        Args:
            order_id: Any.
        """
        raise LookupError("no such order")

    result = await run_tool(agent.tools, "broken", {"order_id": "1"}, None)
    assert result.result == {"error": "broken failed: no such order"}


async def test_a_tool_that_returns_an_agent_hands_the_call_over() -> None:
    returns = Agent(instructions="You handle returns.", name="returns")
    desk = Agent(name="desk")

    @desk.tool
    async def transfer_to_returns(ctx: CallContext) -> Agent:
        """Transfer the caller to the returns desk."""
        return returns

    controls = Controls()
    context = CallContext("call-1", controls, agent=desk)
    result = await run_tool(desk.tools, "transfer_to_returns", {}, context)
    assert result.result == {"handoff": "returns"}
    assert context.agent is returns
    assert controls.done == [("handoff", "returns")]
    assert handoff_target((returns, "done")) == (returns, "done")
    assert handoff_target({"a": 1}) is None


def test_call_tools_put_the_agent_first_and_follow_a_handoff() -> None:
    shared = ToolRegistry()

    async def get_current_time() -> str:
        """The time."""
        return "noon"

    async def lookup() -> str:
        """Shared lookup."""
        return "shared"

    shared.register(ToolSpec.from_function(get_current_time))
    shared.register(ToolSpec.from_function(lookup))
    desk = Agent(name="desk")

    @desk.tool(name="lookup")
    async def desk_lookup() -> str:
        """The desk's own lookup."""
        return "desk"

    tools = CallTools(shared, desk)
    assert [s.name for s in tools] == ["lookup", "get_current_time"]  # no duplicate name
    assert tools.get("lookup") is desk.tools.get("lookup")
    tools.agent = Agent(name="other")
    assert [s.name for s in tools] == ["get_current_time", "lookup"]
    assert tools.get("lookup") is shared.get("lookup")
    with pytest.raises(TypeError):
        tools.register(ToolSpec.from_function(lookup))


async def test_hooks_run_in_order_and_one_that_raises_does_not_stop_the_next() -> None:
    agent = Agent()
    calls: list[Any] = []

    @agent.on_user_turn
    async def first(ctx: CallContext, text: str) -> None:
        raise RuntimeError("boom")

    @agent.on_user_turn
    def second(ctx: CallContext, text: str) -> None:
        calls.append((ctx.call_id, text, threading.get_ident()))

    context = CallContext("call-9", Controls(), agent=agent)
    await agent.run_hooks(agent.user_turn_hooks, context, "hello")
    assert calls and calls[0][:2] == ("call-9", "hello")
    assert calls[0][2] != threading.get_ident()  # a plain def hook ran in a thread


async def test_call_user_function_awaits_async_and_threads_sync() -> None:
    async def a(x: int) -> int:
        return x + 1

    def b(x: int) -> int:
        return x * 2

    assert await call_user_function(a, 1) == 2
    assert await call_user_function(b, 4) == 8


def test_setting_defaults_take_field_or_variable_names() -> None:
    agent = Agent(
        instructions="Be brief.",
        greeting="Hey.",
        settings={"PARLEY_LLM_MODEL": "m1", "turn_end": "silence"},
    )
    assert agent.setting_defaults() == {
        "llm_model": "m1",
        "turn_end": "silence",
        "system_prompt": "Be brief.",
        "greeting": "Hey.",
    }


def test_broken_declarations_fail_at_once() -> None:
    agent = Agent()
    with pytest.raises(TypeError, match="needs a type hint"):

        @agent.tool
        async def untyped(x):  # type: ignore[no-untyped-def]
            """No hint."""

    with pytest.raises(ValueError, match="already has a handler"):
        agent.on_client_message("t")(lambda ctx, d: d)
        agent.on_client_message("t")(lambda ctx, d: d)
    with pytest.raises(ValueError, match="command or url"):
        Agent(mcp_servers=[{"name": "x"}])


def test_a_return_value_json_has_no_type_for_still_reaches_the_llm() -> None:
    from dataclasses import dataclass
    from datetime import UTC, datetime

    from pydantic import BaseModel

    from pipeline.tools.async_protocol import encode_result

    class Order(BaseModel):
        order_id: str
        placed: datetime

    @dataclass
    class Slot:
        day: str

    placed = datetime(2026, 11, 25, 9, 30, tzinfo=UTC)
    assert json.loads(encode_result(Order(order_id="A7", placed=placed))) == {
        "order_id": "A7",
        "placed": "2026-11-25T09:30:00Z",
    }
    assert json.loads(encode_result({"slots": [Slot("Mon")], "tags": {"x"}})) == {
        "slots": [{"day": "Mon"}],
        "tags": ["x"],
    }
    assert json.loads(encode_result({"agent": object})).get("agent").startswith("<class")
