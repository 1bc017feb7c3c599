"""MCP servers as a tool source, against the real SDK server (``testkit.mcp_server``) over
a real stdio subprocess and real streamable HTTP on 127.0.0.1, called through the runner."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import mcp_types as types
import pytest

from pipeline.events import (
    Event,
    FunctionCall,
    FunctionCallCancelled,
    FunctionCallResult,
    FunctionCallsStarted,
)
from pipeline.tools.builtin import default_registry
from pipeline.tools.registry import ToolRegistry
from pipeline.tools.runner import ToolRunner
from pipeline.tools.sources.config import MCPServerConfig
from pipeline.tools.sources.mcp import MCPTools
from pipeline.tools.sources.mcp_results import (
    MissingVariableError,
    expand_headers,
    object_schema,
    result_for_llm,
    tool_name,
)
from pipeline.tools.sources.result_bounds import MAX_RESULT_BYTES
from testkit.mcp_server import HTTPServerProcess
from testkit.server_process import free_port

pytestmark = pytest.mark.e2e

SERVER_TOOLS = {
    *("add", "echo", "pid", "getenv", "slow", "fail", "crash", "lookup_order", "toggle_extra"),
    *("blob", "nested"),
}
BOUND = MAX_RESULT_BYTES
Make = Callable[..., Awaitable[tuple[MCPTools, ToolRegistry]]]


def stdio(name: str = "test", *args: str, **fields: Any) -> MCPServerConfig:
    command = [sys.executable, "-m", "testkit.mcp_server", "--name", name, *args]
    return MCPServerConfig(name=name, command=command, **fields)


class Calls:
    """A tool runner whose results are collected, as the conversation would feed them."""

    def __init__(self, registry: ToolRegistry) -> None:
        self.events: list[Event] = []
        self.runner = ToolRunner(registry, self.events.append)
        self._ids = 0

    def start(self, *calls: tuple[str, dict[str, Any]]) -> list[str]:
        ids = []
        for _ in calls:
            self._ids += 1
            ids.append(f"c{self._ids}")
        group = tuple(FunctionCall(i, n, a) for i, (n, a) in zip(ids, calls, strict=True))
        self.runner.handle(FunctionCallsStarted(group))
        return ids

    def result(self, tool_call_id: str) -> FunctionCallResult | None:
        for event in self.events:
            if isinstance(event, FunctionCallResult) and event.tool_call_id == tool_call_id:
                return event
        return None

    async def wait(self, ids: list[str], within: float = 15.0) -> list[Any]:
        async with asyncio.timeout(within):
            while any(self.result(i) is None for i in ids):
                await asyncio.sleep(0.005)
        return [self.result(i).result for i in ids]  # type: ignore[union-attr]

    async def call(self, tool: str, /, within: float = 15.0, **arguments: Any) -> Any:
        (result,) = await self.wait(self.start((tool, arguments)), within)
        return result


async def until(condition: Callable[[], bool], within: float = 15.0) -> float:
    """Seconds until ``condition`` holds."""
    started = time.monotonic()
    async with asyncio.timeout(within):
        while not condition():
            await asyncio.sleep(0.02)
    return time.monotonic() - started


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def http_server() -> Iterator[HTTPServerProcess]:
    with HTTPServerProcess("test") as server:
        yield server


@pytest.fixture(scope="module")
def json_server() -> Iterator[HTTPServerProcess]:
    """A streamable-HTTP server that answers each request with one JSON body, not SSE."""
    with HTTPServerProcess("test", json_response=True) as server:
        yield server


@pytest.fixture
async def make() -> AsyncIterator[Make]:
    """``await make(*configs, registry=...)``: started MCP tools, closed after the test."""
    made: list[MCPTools] = []

    async def start(
        *configs: MCPServerConfig, registry: ToolRegistry | None = None, within: float = 15.0
    ) -> tuple[MCPTools, ToolRegistry]:
        registry = ToolRegistry() if registry is None else registry
        tools = MCPTools(configs, registry)
        made.append(tools)
        await tools.start(within)
        return tools, registry

    yield start
    for tools in made:
        await tools.aclose()


@pytest.fixture(params=["stdio", "http"])
def config(request: pytest.FixtureRequest) -> MCPServerConfig:
    if request.param == "stdio":
        return stdio(timeout=5.0)
    server: HTTPServerProcess = request.getfixturevalue("http_server")
    return MCPServerConfig(name="test", url=server.url, timeout=5.0)


# -- both transports ---------------------------------------------------------------------


async def test_tools_are_registered_with_the_servers_descriptions_and_schemas(
    make: Make, config: MCPServerConfig
) -> None:
    tools, registry = await make(config)
    status = tools.status()["test"]
    assert status["state"] == "connected", status
    assert status["transport"] == ("stdio" if config.command else "http")
    assert set(status["tools"]) == SERVER_TOOLS == {spec.name for spec in registry}
    add = registry.get("add")
    assert add is not None
    assert add.description == "Add two integers."
    assert add.timeout == 5.0
    # The LLM sees the server's own schema, as the server gave it.
    function = add.openai_tool()["function"]
    assert function["parameters"]["required"] == ["a", "b"]
    assert function["parameters"]["properties"]["a"]["type"] == "integer"
    assert registry.get("pid").parameters["properties"] == {}  # type: ignore[union-attr]
    assert tools.failing() == []


async def test_calls_return_results_and_is_error_results_through_the_runner(
    make: Make, config: MCPServerConfig
) -> None:
    _, registry = await make(config)
    calls = Calls(registry)
    assert await calls.call("add", a=2, b=40) == {"result": 42}
    assert await calls.call("lookup_order", order_id="A-7") == {
        "order_id": "A-7",
        "status": "shipped",
        "items": 2,
    }
    failed = await calls.call("fail", message="no such order")
    assert set(failed) == {"error"} and "no such order" in failed["error"]
    # Wrong arguments: the server's validation answers, as an error the LLM can read.
    wrong = await calls.call("add", a="two", b=1)
    assert set(wrong) == {"error"}
    await calls.runner.close()


async def test_a_slow_call_times_out_and_the_next_call_works(
    make: Make, config: MCPServerConfig
) -> None:
    _, registry = await make(config.model_copy(update={"timeout": 0.5}))
    calls = Calls(registry)
    started = time.monotonic()
    result = await calls.call("slow", seconds=5)
    assert "timed out" in result["error"]
    assert time.monotonic() - started < 3
    assert await calls.call("add", a=1, b=2) == {"result": 3}
    # A call cancelled by an interruption costs only itself, too.
    (cid,) = calls.start(("slow", {"seconds": 5}))
    await asyncio.sleep(0.1)
    calls.runner.handle(FunctionCallCancelled(cid, "slow"))
    assert await calls.call("echo", text="still here") == {"result": "still here"}
    await calls.runner.close()


async def test_many_concurrent_calls_share_one_connection(
    make: Make, config: MCPServerConfig
) -> None:
    _, registry = await make(config)
    calls = Calls(registry)
    group = [("add", {"a": i, "b": 1000}) for i in range(20)] + [("pid", {})] * 20
    results = await calls.wait(calls.start(*group))
    assert results[:20] == [{"result": i + 1000} for i in range(20)]
    pids = {r["result"] for r in results[20:]}
    assert len(pids) == 1, f"answered by {len(pids)} processes"
    if config.command is not None:
        assert pids != {os.getpid()}
    await calls.runner.close()


async def test_a_huge_result_is_cut_at_the_bound(make: Make, config: MCPServerConfig) -> None:
    _, registry = await make(config)
    calls = Calls(registry)
    # Under the HTTP transport's bound of 1 MiB: the result and its text copy, 800 KB.
    result = await calls.call("blob", size=400_000)
    assert isinstance(result, str)
    text, _, note = result.rpartition("\n")
    assert text == "x" * BOUND
    assert "truncated" in note
    failed = await calls.call("fail", message="y" * 400_000)
    assert set(failed) == {"error"} and len(failed["error"]) < BOUND + 200
    await calls.runner.close()


@pytest.mark.parametrize("answers", ["sse", "json"])
async def test_a_result_past_the_transports_bound_fails_only_its_call(
    make: Make, http_server: HTTPServerProcess, json_server: HTTPServerProcess, answers: str
) -> None:
    server = http_server if answers == "sse" else json_server
    tools, registry = await make(MCPServerConfig(name="test", url=server.url, timeout=10.0))
    calls = Calls(registry)
    result = await calls.call("blob", size=2 * 2**20)
    assert set(result) == {"error"}
    assert "1048576" in result["error"], result  # the bound, named
    assert "unavailable" not in result["error"]
    assert await calls.call("add", a=1, b=2) == {"result": 3}
    status = tools.status()["test"]
    assert (status["state"], status["reconnects"]) == ("connected", 0)
    await calls.runner.close()


async def test_structured_content_nested_too_deep_is_given_as_text(
    make: Make, config: MCPServerConfig
) -> None:
    _, registry = await make(config)
    calls = Calls(registry)
    deep = await calls.call("nested", depth=100)
    assert isinstance(deep, str) and '"leaf"' in deep
    shallow = await calls.call("nested", depth=3)
    assert shallow == {"next": {"next": {"leaf": True}}}
    await calls.runner.close()


# -- names -------------------------------------------------------------------------------------


async def test_a_clashing_name_gets_the_servers_prefix_the_others_keep_theirs(make: Make) -> None:
    registry = default_registry()
    assert "get_current_time" in registry
    tools, _ = await make(stdio("clock", "--clash"), registry=registry)
    offered = set(tools.status()["clock"]["tools"])
    assert offered == SERVER_TOOLS | {"clock_get_current_time"}
    calls = Calls(registry)
    server_time = await calls.call("clock_get_current_time")
    assert server_time["result"].endswith("+00:00")  # the server's tool, in UTC
    builtin = await calls.call("get_current_time", timezone="Asia/Tokyo")
    assert builtin["iso"].endswith("+09:00")  # the built-in is untouched
    await calls.runner.close()


async def test_the_first_configured_server_keeps_a_name_two_servers_offer(
    make: Make, http_server: HTTPServerProcess
) -> None:
    # The HTTP server (already running) answers long before the stdio one has started:
    # the configuration's order decides all the same.
    configs = (stdio("first"), MCPServerConfig(name="second", url=http_server.url))
    tools, registry = await make(*configs)
    status = tools.status()
    assert set(status["first"]["tools"]) == SERVER_TOOLS
    assert set(status["second"]["tools"]) == {f"second_{t}" for t in SERVER_TOOLS}
    calls = Calls(registry)
    assert http_server.proc is not None
    assert await calls.call("second_pid") == {"result": http_server.proc.pid}
    assert (await calls.call("pid"))["result"] != http_server.proc.pid
    await calls.runner.close()


async def test_a_changed_tool_list_is_listed_again(make: Make) -> None:
    tools, registry = await make(stdio())
    calls = Calls(registry)
    assert "extra" not in registry
    assert await calls.call("toggle_extra") == {"result": True}
    await until(lambda: "extra" in registry, within=5)
    assert await calls.call("extra") == {"result": "extra"}
    assert "extra" in tools.status()["test"]["tools"]
    assert await calls.call("toggle_extra") == {"result": False}
    await until(lambda: "extra" not in registry, within=5)
    assert set(tools.status()["test"]["tools"]) == SERVER_TOOLS
    await calls.runner.close()


def test_names_and_schemas_are_made_valid_for_the_llm() -> None:
    assert tool_name("weather.get now") == "weather_get_now"
    assert tool_name("x" * 80) == "x" * 64
    assert tool_name("") is None
    assert object_schema({}) == {"type": "object", "properties": {}}
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    assert object_schema(schema) == schema
    assert object_schema({"type": "string"}) is None


def test_results_for_the_llm() -> None:
    text = types.TextContent(text="two lines")
    image = types.ImageContent(data="aGk=", mime_type="image/png")
    both = types.CallToolResult(content=[text, image])
    assert result_for_llm(both) == "two lines\n[image: image/png]"
    structured = types.CallToolResult(content=[text], structured_content={"n": 1})
    assert result_for_llm(structured) == {"n": 1}
    failed = types.CallToolResult(content=[text], structured_content={"n": 1}, is_error=True)
    assert result_for_llm(failed) == {"error": "two lines"}
    # Bounded as HTTP tools' results are: the text cut and marked, too deep as its JSON.
    huge = types.CallToolResult(content=[types.TextContent(text="é" * BOUND)])
    cut, _, note = result_for_llm(huge).rpartition("\n")
    assert cut == "é" * (BOUND // 2) and "truncated" in note  # whole characters, by bytes
    deep: dict[str, Any] = {"leaf": 1}
    for _ in range(40):
        deep = {"next": deep}
    nested = types.CallToolResult(content=[], structured_content=deep)
    assert result_for_llm(nested) == json.dumps(deep, separators=(",", ":"))
    wide = types.CallToolResult(content=[], structured_content={"k": "v" * BOUND})
    assert result_for_llm(wide).startswith('{"k":"vvv') and "truncated" in result_for_llm(wide)
    loud = types.CallToolResult(content=[types.TextContent(text="e" * 10 * BOUND)], is_error=True)
    assert len(result_for_llm(loud)["error"]) < BOUND + 200


# -- failures --------------------------------------------------------------------------------


async def test_a_crash_fails_calls_at_once_and_the_server_comes_back(make: Make) -> None:
    tools, registry = await make(stdio(timeout=30.0))
    calls = Calls(registry)
    first_pid = (await calls.call("pid"))["result"]
    started = time.monotonic()
    in_flight, crash = calls.start(("slow", {"seconds": 20}), ("crash", {}))
    results = await calls.wait([in_flight, crash], within=10)
    assert time.monotonic() - started < 5, "the calls waited for their timeout"
    assert all("unavailable" in r["error"] for r in results), results
    status = tools.status()["test"]
    assert status["state"] == "failing" and status["last_error"]
    assert tools.failing() == ["test"]
    # While it is down its tools stay offered, and a call fails at once.
    assert "add" in registry
    started = time.monotonic()
    down = await calls.call("add", a=1, b=1)
    assert time.monotonic() - started < 3  # no reconnect attempt or timeout is waited for
    assert down["error"].startswith("MCP server test is unavailable (")
    assert down["error"].endswith("); try again later")
    await until(lambda: tools.status()["test"]["state"] == "connected")
    assert await calls.call("add", a=1, b=1) == {"result": 2}
    assert tools.status()["test"]["reconnects"] == 1
    assert tools.failing() == []
    assert (await calls.call("pid"))["result"] != first_pid  # a new process
    await until(lambda: gone(first_pid))
    await calls.runner.close()


async def test_servers_that_cannot_start_are_reported_and_retried(make: Make) -> None:
    port = free_port()
    configs = (
        MCPServerConfig(name="missing", command=["/nonexistent/mcp-server"]),
        MCPServerConfig(name="closed", url=f"http://127.0.0.1:{port}/mcp"),
    )
    started = time.monotonic()
    tools, registry = await make(*configs, within=3.0)
    assert time.monotonic() - started < 3.5
    status = tools.status()
    assert status["missing"]["state"] == status["closed"]["state"] == "failing"
    assert "nonexistent" in status["missing"]["last_error"]
    assert "ConnectError" in status["closed"]["last_error"]
    assert sorted(tools.failing()) == ["closed", "missing"]
    assert len(registry) == 0
    # The one on a closed port comes up later: retried in the background, it connects.
    with HTTPServerProcess("late", port=port):
        await until(lambda: tools.status()["closed"]["state"] == "connected", within=20)
        assert await Calls(registry).call("add", a=3, b=4) == {"result": 7}
        assert tools.failing() == ["missing"]
        await tools.aclose()


async def test_an_http_server_that_dies_fails_its_calls_and_is_reconnected(make: Make) -> None:
    server = HTTPServerProcess("test")
    await asyncio.to_thread(server.start)
    try:
        tools, registry = await make(MCPServerConfig(name="test", url=server.url, timeout=30.0))
        calls = Calls(registry)
        (in_flight,) = calls.start(("slow", {"seconds": 20}))
        await asyncio.sleep(0.3)
        started = time.monotonic()
        server.stop()
        (result,) = await calls.wait([in_flight], within=10)
        assert time.monotonic() - started < 5
        assert "error" in result
        await until(lambda: tools.status()["test"]["state"] == "failing", within=5)
        down = await calls.call("add", a=1, b=1, within=1)
        assert "MCP server test is unavailable" in down["error"]
        await asyncio.to_thread(server.start)
        await until(lambda: tools.status()["test"]["state"] == "connected", within=20)
        assert await calls.call("add", a=1, b=1) == {"result": 2}
        assert tools.status()["test"]["reconnects"] == 1
        # Restarted between two pings: the new process does not know our session.
        await asyncio.to_thread(server.stop)
        await asyncio.to_thread(server.start)
        forgotten = await calls.call("add", a=1, b=1, within=5)
        assert "MCP server test is unavailable" in forgotten["error"]
        await until(lambda: tools.status()["test"]["reconnects"] == 2, within=20)
        assert await calls.call("add", a=2, b=2) == {"result": 4}
        await calls.runner.close()
        await tools.aclose()
    finally:
        server.stop()


async def test_a_missing_header_variable_marks_the_server_failing(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PARLEY_TEST_MCP_TOKEN", raising=False)
    headers = {"Authorization": "Bearer ${PARLEY_TEST_MCP_TOKEN}"}
    config = MCPServerConfig(name="secured", url="http://127.0.0.1:9/mcp", headers=headers)
    tools, _ = await make(config, within=2.0)
    status = tools.status()["secured"]
    assert status["state"] == "failing"
    assert "PARLEY_TEST_MCP_TOKEN" in status["last_error"]
    monkeypatch.setenv("PARLEY_TEST_MCP_TOKEN", "s3cret")
    assert expand_headers(headers) == {"Authorization": "Bearer s3cret"}
    with pytest.raises(MissingVariableError, match="X-Other"):
        expand_headers({"X-Other": "${PARLEY_TEST_MCP_UNSET_VARIABLE}"})


# -- the process -------------------------------------------------------------------------------


async def test_env_is_added_to_a_minimal_environment(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_TEST_MCP_LEAK", "ours only")
    _, registry = await make(stdio(env={"PARLEY_TEST_MCP_GIVEN": "given"}))
    calls = Calls(registry)
    assert await calls.call("getenv", name="PARLEY_TEST_MCP_GIVEN") == {"result": "given"}
    assert await calls.call("getenv", name="PARLEY_TEST_MCP_LEAK") == {"result": None}
    path = await calls.call("getenv", name="PATH")
    assert path == {"result": os.environ["PATH"]}
    await calls.runner.close()


async def test_aclose_stops_the_process_and_drops_the_tools(make: Make) -> None:
    tools, registry = await make(stdio())
    pid = (await Calls(registry).call("pid"))["result"]
    assert not gone(pid)
    await tools.aclose()
    assert gone(pid)
    assert len(registry) == 0
    assert tools.status()["test"]["state"] == "closed"
    await tools.aclose()  # idempotent
