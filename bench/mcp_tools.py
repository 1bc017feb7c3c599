"""What an MCP tool call adds over a local tool doing the same work (``add``).

Each call goes through :class:`pipeline.tools.runner.ToolRunner` as a conversation's would:
timed from ``FunctionCallsStarted`` to its ``FunctionCallResult``. The local tool is an
``async def`` in the registry; the MCP ones are ``testkit.mcp_server`` (the official SDK's
``MCPServer``) over stdio (a subprocess) and over streamable HTTP on 127.0.0.1, each one
shared connection. Calls run one at a time, cases interleaved in rounds after a warm-up;
then ``--concurrent`` calls at once per case (wall time of the batch). Printed: p50 / p95
in ms, and the MCP overhead as the difference of medians.

    .venv/bin/python -m bench.mcp_tools [-n 200] [--concurrent 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

from pipeline.events import Event, FunctionCall, FunctionCallResult, FunctionCallsStarted
from pipeline.tools.registry import ToolRegistry
from pipeline.tools.runner import ToolRunner
from pipeline.tools.sources.config import MCPServerConfig
from pipeline.tools.sources.mcp import MCPTools
from testkit.mcp_server import HTTPServerProcess
from testkit.measure import stats

WARMUP = 10


class Timed:
    """A runner whose calls are awaited one result at a time."""

    def __init__(self, registry: ToolRegistry) -> None:
        self.runner = ToolRunner(registry, self._feed)
        self._waiting: dict[str, asyncio.Future[Any]] = {}
        self._ids = 0

    def _feed(self, event: Event) -> None:
        if isinstance(event, FunctionCallResult) and event.is_final:
            future = self._waiting.pop(event.tool_call_id, None)
            if future is not None:
                future.set_result(event.result)

    async def calls(self, count: int) -> float:
        """``count`` calls of ``add`` started as one group; seconds until the last result."""
        loop = asyncio.get_running_loop()
        group = []
        for i in range(count):
            self._ids += 1
            call_id = f"c{self._ids}"
            self._waiting[call_id] = loop.create_future()
            group.append(FunctionCall(call_id, "add", {"a": i, "b": 1}))
        futures = [self._waiting[c.tool_call_id] for c in group]
        started = time.perf_counter()
        self.runner.handle(FunctionCallsStarted(tuple(group)))
        results = await asyncio.gather(*futures)
        elapsed = time.perf_counter() - started
        bad = [r for r in results if "error" in r]
        if bad:
            raise RuntimeError(f"add failed: {bad[0]}")
        return elapsed


def local_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool()
    async def add(a: int, b: int) -> dict[str, int]:
        """Add two integers."""
        return {"result": a + b}

    return registry


def row(label: str, values: list[float], base: float | None) -> str:
    figures = stats(values)
    line = f"  {label:<8} p50 {figures['p50_ms']:7.2f} ms   p95 {figures['p95_ms']:7.2f} ms"
    if base is not None:
        line += f"   overhead (p50) {1000 * (statistics.median(values) - base):+7.2f} ms"
    return line


async def run(n: int, concurrent: int) -> None:
    with HTTPServerProcess("bench") as http:
        configs = {
            "stdio": MCPServerConfig(
                name="stdio", command=[sys.executable, "-m", "testkit.mcp_server"]
            ),
            "http": MCPServerConfig(name="http", url=http.url),
        }
        registries = {"local": local_registry()} | {name: ToolRegistry() for name in configs}
        sources = {name: MCPTools([c], registries[name]) for name, c in configs.items()}
        for name, source in sources.items():
            await source.start()
            if source.failing():
                raise RuntimeError(f"MCP server {name}: {source.status()[name]['last_error']}")
        timed = {name: Timed(registry) for name, registry in registries.items()}
        try:
            await report(timed, n, concurrent)
        finally:
            for t in timed.values():
                await t.runner.close()
            for source in sources.values():
                await source.aclose()


async def report(timed: dict[str, Timed], n: int, concurrent: int) -> None:
    one: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(WARMUP):
        for t in timed.values():
            await t.calls(1)
    for _ in range(n):
        for name, t in timed.items():
            one[name].append(await t.calls(1))
    base = statistics.median(one["local"])
    print(f"one call at a time, {n} calls per case (through the tool runner):")
    for name, values in one.items():
        print(row(name, values, None if name == "local" else base))
    batches: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(max(1, n // concurrent)):
        for name, t in timed.items():
            batches[name].append(await t.calls(concurrent))
    base = statistics.median(batches["local"])
    print(f"{concurrent} concurrent calls, wall time of the batch (one shared connection):")
    for name, values in batches.items():
        print(row(name, values, None if name == "local" else base))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200, help="calls per case")
    parser.add_argument("--concurrent", type=int, default=20, help="calls per batch")
    args = parser.parse_args()
    asyncio.run(run(args.n, args.concurrent))


if __name__ == "__main__":
    main()
