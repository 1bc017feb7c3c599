"""The tool runner against the real emitter, assistant aggregator and context."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from pipeline.aggregators import AssistantAggregator
from pipeline.context.llm_context import LLMContext
from pipeline.events import (
    AppMessage,
    Emitter,
    Event,
    FunctionCall,
    FunctionCallCancelled,
    FunctionCallInProgress,
    FunctionCallResult,
    FunctionCallsStarted,
    Interruption,
    LLMRunRequested,
)
from pipeline.tools import async_protocol as async_tools
from pipeline.tools.builtin import default_registry
from pipeline.tools.registry import ToolCall, ToolRegistry, ToolSpec
from pipeline.tools.runner import ToolRunner


class Bench:
    """A conversation's function-call wiring: emitter → aggregator + runner → context."""

    def __init__(self, registry: ToolRegistry) -> None:
        self.context = LLMContext([{"role": "system", "content": "Be brief."}])
        self.events = Emitter()
        self.seen: list[Event] = []
        self.assistant = AssistantAggregator(self.context, self.events.emit, clock=lambda: "T")
        # As in the conversation: the aggregator subscribes before the runner.
        for kind in (
            FunctionCallsStarted, FunctionCallInProgress, FunctionCallResult,
            FunctionCallCancelled, Interruption,
        ):  # fmt: skip
            self.events.on(kind, self.assistant.handle)
        self.runner = ToolRunner(registry, self.events.emit)
        self.runner.attach(self.events)
        for kind in (FunctionCallInProgress, FunctionCallResult, LLMRunRequested):
            self.events.on(kind, self.seen.append)

    def start(self, *calls: tuple[str, str, dict[str, Any]]) -> None:
        group = "g1" if len(calls) > 1 else None
        self.events.emit(
            FunctionCallsStarted(tuple(FunctionCall(i, n, a, group_id=group) for i, n, a in calls))
        )

    async def settle(self) -> None:
        """Every call has its final result, and the aggregator had its loop step."""
        await until(lambda: not self.runner.running)
        await asyncio.sleep(0.01)

    def results(self, tool_call_id: str) -> list[FunctionCallResult]:
        return [
            e
            for e in self.seen
            if isinstance(e, FunctionCallResult) and e.tool_call_id == tool_call_id
        ]

    def tool_result(self, tool_call_id: str) -> Any:
        message = self.context.find_tool_message(tool_call_id)
        assert message is not None, f"no tool message for {tool_call_id}"
        return json.loads(message.content)

    def runs(self) -> int:
        return sum(isinstance(e, LLMRunRequested) for e in self.seen)


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(2):
        while not condition():
            await asyncio.sleep(0.005)


@pytest.fixture
def registry() -> ToolRegistry:
    return default_registry(demo_tools=True, research_steps=3, research_interval=0.02)


@pytest.fixture
async def bench(registry: ToolRegistry) -> Any:
    bench = Bench(registry)
    yield bench
    await bench.runner.close()


# -- results ---------------------------------------------------------------------------------


async def test_a_call_lands_in_the_context_and_the_llm_runs_once(bench: Bench) -> None:
    bench.start(("c1", "get_current_time", {"timezone": "Asia/Tokyo"}))
    announced = [e for e in bench.seen if isinstance(e, FunctionCallInProgress)]
    assert [e.call.tool_call_id for e in announced] == ["c1"]
    assert bench.context.find_tool_message("c1").content == "IN_PROGRESS"  # type: ignore[union-attr]
    await bench.settle()
    wire = bench.context.to_openai()
    assert wire[1]["role"] == "assistant"
    assert wire[1]["tool_calls"][0]["function"] == {
        "name": "get_current_time",
        "arguments": json.dumps({"timezone": "Asia/Tokyo"}),
    }
    assert bench.tool_result("c1")["iso"].endswith("+09:00")
    assert bench.runs() == 1
    assert not bench.assistant.has_function_calls_in_progress


async def test_parallel_calls_run_concurrently_and_the_llm_runs_once() -> None:
    registry = ToolRegistry()
    spans: dict[str, tuple[float, float]] = {}

    @registry.tool()
    async def slow(label: str) -> str:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(0.2)
        spans[label] = (start, loop.time())
        return label

    bench = Bench(registry)
    began = asyncio.get_running_loop().time()
    bench.start(("a", "slow", {"label": "a"}), ("b", "slow", {"label": "b"}))
    await bench.settle()
    elapsed = asyncio.get_running_loop().time() - began
    (start_a, end_a), (start_b, end_b) = spans["a"], spans["b"]
    # That they overlapped is the point; how long the pair took is bench/'s business.
    assert max(start_a, start_b) < min(end_a, end_b), f"ran one after the other ({elapsed:.2f}s)"
    assert (bench.tool_result("a"), bench.tool_result("b")) == ("a", "b")
    assert bench.runs() == 1, "one LLM run for the whole parallel group"


async def test_async_tool_streams_progress_then_its_final_result(bench: Bench) -> None:
    bench.start(("r1", "research_topic", {"topic": "tides"}))
    announced = next(e for e in bench.seen if isinstance(e, FunctionCallInProgress))
    assert announced.call.cancel_on_interruption is False, "taken from the spec"
    await bench.settle()
    assert [r.is_final for r in bench.results("r1")] == [False, False, False, True]
    messages = bench.context.to_openai()[2:]
    payloads = [async_tools.parse_message(m) for m in messages]
    assert [(p.kind, p.status) for p in payloads] == [  # type: ignore[union-attr]
        ("started", "running"),
        ("intermediate", "running"),
        ("intermediate", "running"),
        ("intermediate", "running"),
        ("final", "finished"),
    ]
    progress = [json.loads(p.result)["progress"] for p in payloads[1:4]]  # type: ignore[union-attr, arg-type]
    assert progress == ["step 1 of 3", "step 2 of 3", "step 3 of 3"]
    assert "tides" in json.loads(payloads[4].result)["summary"]  # type: ignore[union-attr, arg-type]
    assert bench.runs() == 1, "progress is recorded silently; the final result is answered"


async def test_a_failing_tool_gives_an_error_result_and_the_next_call_works() -> None:
    registry = ToolRegistry()

    @registry.tool()
    async def flaky(fail: bool) -> str:
        if fail:
            raise RuntimeError("database unreachable")
        return "ok"

    bench = Bench(registry)
    bench.start(("c1", "flaky", {"fail": True}))
    await bench.settle()
    assert bench.tool_result("c1") == {"error": "flaky failed: database unreachable"}
    assert bench.runs() == 1, "the LLM hears about the failure"
    bench.start(("c2", "flaky", {"fail": False}))
    await bench.settle()
    assert bench.tool_result("c2") == "ok"


async def test_a_slow_tool_times_out() -> None:
    registry = ToolRegistry()

    @registry.tool(timeout=0.05)
    async def stuck() -> str:
        await asyncio.sleep(10)
        return "never"

    bench = Bench(registry)
    bench.start(("c1", "stuck", {}))
    await bench.settle()
    assert bench.tool_result("c1") == {"error": "stuck timed out after 0.05s"}


async def test_a_tools_own_timeout_error_is_a_failure_not_a_timeout() -> None:
    registry = ToolRegistry()

    @registry.tool()
    async def upstream() -> str:
        raise TimeoutError("upstream took too long")

    bench = Bench(registry)
    bench.start(("c1", "upstream", {}))
    await bench.settle()
    assert bench.tool_result("c1") == {"error": "upstream failed: upstream took too long"}


async def test_unknown_tool_and_invalid_arguments_are_error_results() -> None:
    registry = ToolRegistry()
    called: list[int] = []

    @registry.tool()
    async def add(a: int, b: int) -> int:
        called.append(1)
        return a + b

    bench = Bench(registry)
    bench.start(
        ("c1", "teleport", {}),
        ("c2", "add", {"a": 1, "b": "two"}),
        ("c3", "add", {"a": 1, "b": 2}),
    )
    await bench.settle()
    assert bench.tool_result("c1") == {"error": "unknown tool teleport"}
    assert bench.tool_result("c2") == {
        "error": "invalid arguments for add: b: Input should be a valid integer, "
        "unable to parse string as an integer"
    }
    assert bench.tool_result("c3") == 3 and called == [1]
    assert bench.runs() == 1, "instant errors did not make the group answer early"


# -- cancellation --------------------------------------------------------------------------------


async def test_interruption_cancels_cancellable_calls_while_async_tools_go_on(
    registry: ToolRegistry,
) -> None:
    cancelled: list[str] = []

    @registry.tool()
    async def lookup(*, call: ToolCall) -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(call.tool_call_id)
            # A handler that ignores cancellation must still not reach the context.
            await call.result_callback("too late")
            raise
        return "never"

    bench = Bench(registry)
    bench.start(("c1", "lookup", {}), ("r1", "research_topic", {"topic": "moons"}))
    await asyncio.sleep(0.01)
    bench.events.emit(Interruption(1.0))
    await asyncio.sleep(0.01)
    assert cancelled == ["c1"]
    assert bench.context.find_tool_message("c1").content == "CANCELLED"  # type: ignore[union-attr]
    assert bench.runner.running == {"r1"}
    await bench.settle()
    assert bench.results("c1") == [], "nothing is fed for a cancelled call"
    assert [r.is_final for r in bench.results("r1")] == [False, False, False, True]
    final = async_tools.parse_message(bench.context.to_openai()[-1])
    assert final is not None and final.kind == "final" and final.tool_call_id == "r1"
    await bench.runner.close()


async def test_cancelling_an_async_tool_is_ignored(bench: Bench) -> None:
    bench.start(("r1", "research_topic", {"topic": "stars"}))
    bench.events.emit(FunctionCallCancelled("r1", "research_topic"))
    await bench.settle()
    assert bench.results("r1")[-1].is_final


async def test_close_cancels_everything_and_feeds_nothing_more(bench: Bench) -> None:
    bench.start(("r1", "research_topic", {"topic": "comets"}))
    await until(lambda: bool(bench.results("r1")))
    await bench.runner.close()
    count = len(bench.seen)
    await asyncio.sleep(0.08)
    assert bench.runner.running == frozenset()
    assert len(bench.seen) == count
    bench.start(("c2", "get_current_time", {}))
    assert len(bench.seen) == count, "a closed runner starts nothing"


# -- reporting ------------------------------------------------------------------------------------


async def test_a_handler_may_report_its_final_result_itself() -> None:
    registry = ToolRegistry()

    @registry.tool()
    async def log_event(name: str, *, call: ToolCall) -> str:
        await call.result_callback({"logged": name}, run_llm=False)
        return "ignored: the final result is in"

    bench = Bench(registry)
    bench.start(("c1", "log_event", {"name": "signup"}))
    await bench.settle()
    assert [r.result for r in bench.results("c1")] == [{"logged": "signup"}]
    assert bench.runs() == 0, "run_llm=False: recorded without an answer"


async def test_results_from_a_handlers_own_task_are_delivered() -> None:
    registry = ToolRegistry()

    @registry.tool(cancel_on_interruption=False)
    async def fan_out(*, call: ToolCall) -> str:
        async def worker(n: int) -> None:
            await call.result_callback({"part": n}, is_final=False)

        await asyncio.gather(worker(1), worker(2))
        return "done"

    bench = Bench(registry)
    bench.start(("c1", "fan_out", {}))
    await bench.settle()
    assert [r.result for r in bench.results("c1")] == [{"part": 1}, {"part": 2}, "done"]


async def test_spec_run_llm_applies_to_the_final_result() -> None:
    registry = ToolRegistry()

    @registry.tool(run_llm=False)
    async def remember(fact: str) -> dict[str, str]:
        return {"saved": fact}

    bench = Bench(registry)
    bench.start(("c1", "remember", {"fact": "likes tea"}))
    await bench.settle()
    assert bench.results("c1")[0].run_llm is False
    assert bench.tool_result("c1") == {"saved": "likes tea"} and bench.runs() == 0


async def test_client_side_tools_are_left_to_the_client() -> None:
    registry = ToolRegistry()
    registry.register(
        ToolSpec("show_map", "Show a map.", {"type": "object", "properties": {}}, client_side=True)
    )
    bench = Bench(registry)
    bench.start(("c1", "show_map", {}))
    await asyncio.sleep(0.01)
    assert bench.seen == [] and bench.runner.running == frozenset()


async def test_a_tool_can_push_messages_to_the_client_until_cancelled() -> None:
    registry = ToolRegistry()
    release = asyncio.Event()
    helpers: list[asyncio.Task[None]] = []

    @registry.tool()
    async def long_job(*, call: ToolCall) -> str:
        """A job that tells the client how it goes."""

        async def report_later() -> None:
            await release.wait()
            call.send_server_message({"step": 2})

        call.send_server_message({"step": 1})
        helpers.append(asyncio.create_task(report_later()))
        await asyncio.Event().wait()
        return "never"

    bench = Bench(registry)
    pushed: list[AppMessage] = []
    bench.events.on(AppMessage, pushed.append)
    bench.start(("c1", "long_job", {}))
    await until(lambda: len(pushed) == 1)
    assert pushed[0].data == {"step": 1}
    bench.events.emit(Interruption(1.0))  # cancels the call: nothing more from it
    release.set()
    await asyncio.gather(*helpers)
    assert len(pushed) == 1
    await bench.runner.close()
