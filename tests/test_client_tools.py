"""Client-side tool calls against the real emitter, runner, assistant aggregator and context."""

from __future__ import annotations

import asyncio
import json

import pytest

from pipeline.aggregators import AssistantAggregator
from pipeline.context.llm_context import LLMContext
from pipeline.events import (
    Emitter,
    Event,
    FunctionCall,
    FunctionCallCancelled,
    FunctionCallInProgress,
    FunctionCallResult,
    FunctionCallsStarted,
    Interruption,
    LLMRunRequested,
    ServiceError,
)
from pipeline.tools.client import ClientToolCalls, ClientToolError
from pipeline.tools.registry import ToolRegistry, ToolSpec
from pipeline.tools.runner import ToolRunner

LOCATION = ToolSpec(
    name="get_location",
    description="Where the user is.",
    parameters={"type": "object", "properties": {}},
    client_side=True,
    timeout=0.2,
)


class Bench:
    """Emitter → aggregator, server runner and client calls → context, as in a session."""

    def __init__(self, *specs: ToolSpec) -> None:
        self.registry = ToolRegistry()
        for spec in specs:
            self.registry.register(spec)
        self.context = LLMContext([{"role": "system", "content": "Be brief."}])
        self.events = Emitter()
        self.seen: list[Event] = []
        aggregator = AssistantAggregator(self.context, self.events.emit, clock=lambda: "T")
        for kind in (
            FunctionCallsStarted, FunctionCallInProgress, FunctionCallResult,
            FunctionCallCancelled, Interruption,
        ):  # fmt: skip
            self.events.on(kind, aggregator.handle)
        ToolRunner(self.registry, self.events.emit).attach(self.events)
        self.calls = ClientToolCalls(self.registry, self.events.emit, default_timeout=5)
        self.calls.attach(self.events)
        kinds = (FunctionCallInProgress, FunctionCallResult, LLMRunRequested, ServiceError)
        for kind in kinds:
            self.events.on(kind, self.seen.append)

    def call(self, tool_call_id: str, name: str = "get_location") -> None:
        self.events.emit(FunctionCallsStarted((FunctionCall(tool_call_id, name, {"a": 1}),)))

    def tool_message(self, tool_call_id: str) -> str:
        messages = self.context.to_openai()
        return next(m for m in messages if m.get("tool_call_id") == tool_call_id)["content"]


async def test_the_clients_result_goes_into_the_context_and_runs_the_llm() -> None:
    bench = Bench(LOCATION)
    bench.call("c1")
    assert isinstance(bench.seen[0], FunctionCallInProgress)
    assert bench.calls.waiting == {"c1"}
    assert bench.tool_message("c1") == "IN_PROGRESS"
    bench.calls.resolve("c1", "get_location", {"city": "Paris"})
    await asyncio.sleep(0.01)
    assert json.loads(bench.tool_message("c1")) == {"city": "Paris"}
    assert any(isinstance(e, LLMRunRequested) for e in bench.seen)
    with pytest.raises(ClientToolError, match="no client tool call 'c1'"):
        bench.calls.resolve("c1", "get_location", "again")


async def test_wrong_name_or_unknown_id_is_refused_and_the_call_keeps_waiting() -> None:
    bench = Bench(LOCATION)
    bench.call("c1")
    with pytest.raises(ClientToolError, match="is for 'get_location'"):
        bench.calls.resolve("c1", "other", "x")
    with pytest.raises(ClientToolError, match="'nope'"):
        bench.calls.resolve("nope", "get_location", "x")
    assert bench.calls.waiting == {"c1"}
    bench.calls.close()


async def test_no_answer_in_time_gives_the_llm_an_error_and_reports_it() -> None:
    bench = Bench(LOCATION)
    bench.call("c1")
    await asyncio.sleep(0.35)
    errors = [e for e in bench.seen if isinstance(e, ServiceError)]
    assert len(errors) == 1 and "get_location" in errors[0].error and "c1" in errors[0].error
    result = json.loads(bench.tool_message("c1"))
    assert result == {"error": "the client did not run get_location within 0.2s"}
    assert bench.calls.waiting == frozenset()


async def test_an_interruption_cancels_the_wait() -> None:
    bench = Bench(LOCATION)
    bench.call("c1")
    bench.events.emit(Interruption(1.0))
    assert bench.calls.waiting == frozenset()
    assert bench.tool_message("c1") == "CANCELLED"
    await asyncio.sleep(0.3)
    assert not [e for e in bench.seen if isinstance(e, ServiceError)], "no timeout after cancel"


async def test_server_tools_are_left_to_the_runner() -> None:
    async def get_time() -> str:
        """The time."""
        return "noon"

    bench = Bench(LOCATION, ToolSpec.from_function(get_time))
    bench.events.emit(
        FunctionCallsStarted(
            (
                FunctionCall("s1", "get_time", group_id="g"),
                FunctionCall("c1", "get_location", group_id="g"),
            )
        )
    )
    announced = [e.call.tool_call_id for e in bench.seen if isinstance(e, FunctionCallInProgress)]
    assert sorted(announced) == ["c1", "s1"], "each call announced once"
    assert bench.calls.waiting == {"c1"}
    await asyncio.sleep(0.01)
    assert bench.tool_message("s1") == '"noon"'
    assert not any(isinstance(e, LLMRunRequested) for e in bench.seen), "the group waits"
    bench.calls.resolve("c1", "get_location", "Paris")
    await asyncio.sleep(0.01)
    assert any(isinstance(e, LLMRunRequested) for e in bench.seen)
