"""Job groups: lifecycle order, updates, cancellation into the context, over a real server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

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
)
from pipeline.messages import DeveloperMessage
from pipeline.tools import async_protocol as async_tools
from pipeline.tools.registry import ToolCall, ToolRegistry, ToolSpec
from pipeline.tools.runner import ToolRunner
from pipeline.ui.job_groups import JobGroupError, JobGroups, worker_names
from pipeline.ui.protocol import UIJobGroupData
from testkit.openai_stub import ChatReply, OpenAIStub
from testkit.openai_stub import ToolCall as StubToolCall
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess


class Harness:
    """A conversation's function-call plumbing: emitter, assistant aggregator, runner,
    job groups, with the tools ``slow`` (async, gated) and ``quick`` (ordinary)."""

    def __init__(self, auto_group: bool = True) -> None:
        self.events = Emitter()
        self.context = LLMContext()
        self.sent: list[UIJobGroupData] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.assistant = AssistantAggregator(self.context, self.feed, schedule=lambda cb: None)
        for kind in (
            FunctionCallsStarted,
            FunctionCallInProgress,
            FunctionCallResult,
            FunctionCallCancelled,
        ):
            self.events.on(kind, self.assistant.handle)
        registry = ToolRegistry()
        registry.register(ToolSpec.from_function(self._slow(), cancel_on_interruption=False))
        registry.register(ToolSpec.from_function(quick))
        self.runner = ToolRunner(registry, self.feed)

        def is_async(name: str) -> bool:
            spec = registry.get(name)
            return spec is not None and not spec.cancel_on_interruption

        self.jobs = JobGroups(self.sent.append, self.feed, is_async, self.runner.abort, auto_group)
        self.jobs.attach(self.events)
        self.runner.attach(self.events)

    def feed(self, event: Event) -> None:
        self.events.emit(event)

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    def _slow(self) -> Any:
        async def slow(name: str, *, call: ToolCall) -> dict[str, Any]:
            """A job that reports once, then waits for its gate.

            Args:
                name: Which gate to wait for.
            """
            await call.result_callback({"progress": f"{name} half"}, is_final=False)
            await self.gate(name).wait()
            return {"done": name}

        return slow

    def kinds(self) -> list[str]:
        return [m.kind for m in self.sent]

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)


async def quick(x: int = 0) -> dict[str, Any]:
    """An ordinary tool.

    Args:
        x: Anything.
    """
    await asyncio.sleep(0)
    return {"x": x}


def finals(context: LLMContext) -> dict[str, str]:
    """tool_call_id → final async-tool result in the context."""
    out = {}
    for message in context.messages:
        if isinstance(message, DeveloperMessage):
            payload = async_tools.parse_message(message)
            if payload is not None and payload.kind == "final":
                out[payload.tool_call_id] = payload.result or ""
    return out


def test_worker_names_are_unique_within_a_group() -> None:
    assert worker_names(["a", "b", "a"]) == ["a-1", "b", "a-2"]
    assert worker_names(["search"]) == ["search"]


async def test_an_app_group_runs_its_lifecycle_in_order() -> None:
    h = Harness()
    job_id = h.jobs.start([("slow", {"name": "a"}), ("slow", {"name": "b"})], label="two")
    await h.settle()
    assert h.kinds() == ["group_started", "job_update", "job_update"]
    started = h.sent[0]
    assert started.job_id == job_id and started.label == "two" and started.cancellable
    assert started.workers == ["slow-1", "slow-2"]
    h.gate("b").set()
    await h.settle()
    h.gate("a").set()
    await h.settle()
    assert h.kinds() == [
        "group_started",
        "job_update",
        "job_update",
        "job_completed",
        "job_completed",
        "group_completed",
    ]
    done = [m for m in h.sent if m.kind == "job_completed"]
    assert [(m.worker_name, m.status) for m in done] == [
        ("slow-2", "completed"),
        ("slow-1", "completed"),
    ]
    assert done[0].response == {"done": "b"}
    assert all(m.job_id == job_id for m in h.sent)
    assert h.jobs.running == []
    # The jobs are async tools in the context: started, intermediate, final.
    assert sorted(finals(h.context).values()) == ['{"done": "a"}', '{"done": "b"}']


async def test_cancelling_mid_group_ends_the_running_jobs_as_cancelled() -> None:
    h = Harness()
    job_id = h.jobs.start([("slow", {"name": "a"}), ("slow", {"name": "b"})])
    await h.settle()
    h.gate("a").set()
    await h.settle()
    assert h.kinds()[-1] == "job_completed"
    assert h.jobs.cancel(job_id, "changed my mind") == 1
    assert h.kinds()[-2:] == ["job_completed", "group_completed"]
    cancelled = h.sent[-2]
    assert cancelled.status == "cancelled" and cancelled.worker_name == "slow-2"
    # The context says so through the async-tool protocol.
    results = finals(h.context)
    assert len(results) == 2
    assert json.loads(results[f"job_{job_id}_2"]) == {
        "status": "cancelled",
        "reason": "changed my mind",
    }
    # The aborted task is gone: opening its gate feeds nothing more.
    h.gate("b").set()
    await h.settle()
    assert h.kinds()[-1] == "group_completed"
    assert h.runner.running == frozenset()
    with pytest.raises(JobGroupError):
        h.jobs.cancel(job_id)


async def test_ordinary_calls_in_a_group_are_cancelled_like_on_a_barge_in() -> None:
    h = Harness()
    gate = asyncio.Event()

    async def never(*, call: ToolCall) -> None:
        """Waits."""
        await gate.wait()

    h.runner.registry.register(ToolSpec.from_function(never))
    job_id = h.jobs.start([("never", {})])
    await h.settle()
    h.jobs.cancel(job_id)
    assert h.kinds() == ["group_started", "job_completed", "group_completed"]
    tool = h.context.find_tool_message(f"job_{job_id}_1")
    assert tool is not None and tool.content == "CANCELLED"


async def test_async_calls_of_one_llm_response_become_a_group() -> None:
    h = Harness()
    calls = (
        FunctionCall("c1", "slow", {"name": "a"}, group_id="g1"),
        FunctionCall("c2", "quick", {"x": 1}, group_id="g1"),
    )
    h.feed(FunctionCallsStarted(calls))
    await h.settle()
    assert h.sent[0].kind == "group_started" and h.sent[0].workers == ["slow"]
    assert h.sent[0].job_id == "g1"
    h.gate("a").set()
    await h.settle()
    assert h.kinds() == ["group_started", "job_update", "job_completed", "group_completed"]


async def test_no_auto_groups_when_turned_off() -> None:
    h = Harness(auto_group=False)
    h.feed(FunctionCallsStarted((FunctionCall("c1", "slow", {"name": "a"}),)))
    h.gate("a").set()
    await h.settle()
    assert h.sent == []


async def test_a_job_that_cannot_run_completes_with_an_error() -> None:
    h = Harness()
    h.jobs.start([("no_such_tool", {}), ("quick", {"x": "not a number"})])
    await h.settle()
    assert h.kinds() == ["group_started", "job_completed", "job_completed", "group_completed"]
    statuses = {m.worker_name: (m.status, m.response) for m in h.sent if m.kind == "job_completed"}
    assert statuses["no_such_tool"] == ("error", {"error": "unknown tool no_such_tool"})
    assert statuses["quick"][0] == "error" and "invalid arguments" in statuses["quick"][1]["error"]


async def test_bad_requests_are_refused() -> None:
    h = Harness()
    with pytest.raises(JobGroupError):
        h.jobs.start([])
    with pytest.raises(JobGroupError):
        h.jobs.cancel("nope")
    job_id = h.jobs.start([("slow", {"name": "a"})], cancellable=False)
    with pytest.raises(JobGroupError, match="cannot be cancelled"):
        h.jobs.cancel(job_id)
    h.gate("a").set()
    await h.settle()
    assert h.kinds()[-1] == "group_completed"


# -- through a real server --------------------------------------------------------------------


@pytest.fixture(scope="module")
def stub_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    # demo_tools: research_topic, the demo async tool
    return start_server(**stub.server_settings(demo_tools="true"))


def group_messages(client: RTCTestClient) -> list[dict[str, Any]]:
    return [m["data"] for m in client.messages if m.get("type") == "ui-job-group"]


async def wait_kind(client: RTCTestClient, kind: str, within: float = 15.0) -> dict[str, Any]:
    msg = await client.wait_for(
        lambda m: m.get("type") == "ui-job-group" and m["data"]["kind"] == kind, within
    )
    return msg["data"]


@pytest.mark.e2e
async def test_parallel_async_tool_calls_are_one_job_group_in_order(
    stub_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    calls = (
        StubToolCall("research_topic", {"topic": "owls"}),
        StubToolCall("research_topic", {"topic": "bats"}),
    )
    stub.script_chat(ChatReply("On it.", calls), "Both are done.")
    client = RTCTestClient(stub_server.url)
    try:
        await client.connect()
        client.send_rtvi("send-text", {"content": "Research owls and bats.",
                                       "options": {"audio_response": False}})  # fmt: skip
        await wait_kind(client, "group_completed", within=20)
        lifecycle = group_messages(client)
        kinds = [m["kind"] for m in lifecycle]
        assert kinds[0] == "group_started" and kinds[-1] == "group_completed"
        assert kinds.count("job_update") == 6 and kinds.count("job_completed") == 2  # 3 steps each
        for worker in ("research_topic-1", "research_topic-2"):
            steps = [m["kind"] for m in lifecycle if m.get("worker_name") == worker]
            assert steps == ["job_update"] * 3 + ["job_completed"], (worker, steps)
        assert lifecycle[0]["workers"] == ["research_topic-1", "research_topic-2"]
        assert len({m["job_id"] for m in lifecycle}) == 1
        completed = [m for m in lifecycle if m["kind"] == "job_completed"]
        assert {m["status"] for m in completed} == {"completed"}
        assert all(isinstance(m["at"], int) and m["at"] > 0 for m in lifecycle)
        # The results are in: the LLM answers once more (and takes its scripted reply).
        await client.wait_for(
            lambda m: m.get("type") == "bot-output" and "Both" in m["data"]["text"]
        )
    finally:
        await client.close()
        stub.reset()


@pytest.mark.e2e
async def test_cancelling_a_group_from_the_client(
    stub_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    calls = (
        StubToolCall("research_topic", {"topic": "owls"}),
        StubToolCall("research_topic", {"topic": "bats"}),
    )
    stub.script_chat(ChatReply("", calls), "Fine, stopped.")
    client = RTCTestClient(stub_server.url)
    try:
        await client.connect()
        client.send_rtvi("send-text", {"content": "Research owls and bats.",
                                       "options": {"audio_response": False}})  # fmt: skip
        started = await wait_kind(client, "group_started")
        await wait_kind(client, "job_update")
        client.send_rtvi("ui-cancel-job-group", {"job_id": started["job_id"], "reason": "stop"})
        await wait_kind(client, "group_completed", within=5)
        completed = [m for m in group_messages(client) if m["kind"] == "job_completed"]
        assert [m["status"] for m in completed] == ["cancelled", "cancelled"]
        # Nothing of the stopped jobs arrives afterwards, and the session goes on.
        await asyncio.sleep(1.5)
        assert group_messages(client)[-1]["kind"] == "group_completed"
        bad = client.send_rtvi("ui-cancel-job-group", {"job_id": started["job_id"]})
        refused = await client.wait_for(lambda m: m.get("id") == bad)
        assert (
            refused["type"] == "error-response"
            and "no running job group" in (refused["data"]["error"])
        )
        # The next LLM request shows the jobs ended cancelled (async-tool protocol).
        client.send_rtvi("send-text", {"content": "Thanks.",
                                       "options": {"audio_response": False}})  # fmt: skip
        assert await stub.wait_for(lambda: len(stub.requests("/v1/chat/completions")) >= 2, 10)
        messages = stub.requests("/v1/chat/completions")[-1].body["messages"]
        finished = [
            json.loads(m["content"])
            for m in messages
            if m["role"] == "developer" and '"status": "finished"' in m["content"]
        ]
        assert len(finished) == 2
        assert all(json.loads(p["result"])["status"] == "cancelled" for p in finished)
    finally:
        await client.close()
        stub.reset()
