"""Memory per call with MCP servers configured: flat, because every call shares one
connection (one process for stdio) per server.

Starts the OpenAI-compatible stub and a Parley server, first with no MCP server and then
with three stdio MCP servers (``testkit.mcp_server``); opens calls one after another, each
making one MCP tool call through the scripted LLM and staying open, and reads after each
step the server's RSS, the number of MCP processes and their RSS. Memory per call is the
slope of the server's RSS over the open calls (least squares).

    .venv/bin/python -m bench.mcp_memory --calls 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from server.process.proc import ProcReader
from testkit.openai_stub import ChatReply, OpenAIStub, ToolCall
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

CHAT = "/v1/chat/completions"
SERVERS = ("orders", "stock", "hours")


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (its MCP servers)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.extend(int(p) for p in text)
    return found


def rss_mb(pid: int) -> float:
    rss = ProcReader(pid).read().rss_bytes
    return (rss or 0) / 2**20


def mcp_settings() -> str:
    argv = [sys.executable, "-m", "testkit.mcp_server", "--transport", "stdio"]
    return json.dumps([{"name": n, "command": [*argv, "--name", n]} for n in SERVERS])


async def open_calls(
    server: ServerProcess, stub: OpenAIStub, calls: int, tool: str | None
) -> list[dict[str, Any]]:
    """Open ``calls`` calls, each making one tool call; the figures after each one."""
    clients: list[RTCTestClient] = []
    steps: list[dict[str, Any]] = []
    pid = server.proc.pid
    try:
        steps.append(sample(pid, 0))
        for n in range(1, calls + 1):
            replies: list[ChatReply | str] = ["Done."]
            if tool is not None:
                replies.insert(0, ChatReply(tool_calls=(ToolCall(tool, {"a": n, "b": 1}),)))
            stub.script_chat(*replies)
            before = len(stub.requests(CHAT))
            client = RTCTestClient(server.url)
            clients.append(client)
            await client.connect()
            client.send_rtvi("send-text", {"content": "Add them."})
            want = before + len(replies)
            assert await stub.wait_for(lambda w=want: len(stub.requests(CHAT)) >= w, within=20)
            await asyncio.sleep(0.5)  # the answer's audio started and the heap settled
            steps.append(sample(pid, n))
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    return steps


def sample(pid: int, calls: int) -> dict[str, Any]:
    kids = children(pid)
    return {
        "calls": calls,
        "server_rss_mb": round(rss_mb(pid), 1),
        "mcp_processes": len(kids),
        "mcp_rss_mb": round(sum(rss_mb(k) for k in kids), 1),
    }


def slope(steps: list[dict[str, Any]]) -> float:
    xs = [s["calls"] for s in steps]
    ys = [s["server_rss_mb"] for s in steps]
    return statistics.linear_regression(xs, ys).slope


def run(
    label: str, settings: dict[str, str], calls: int, tool: str | None, folder: Path
) -> dict[str, Any]:
    with OpenAIStub() as stub:
        env = {f"PARLEY_{k.upper()}": v for k, v in stub.server_settings(**settings).items()}
        server = ServerProcess(env, folder / f"{label}.log")
        try:
            time.sleep(2.0)  # the MCP servers connected, start-up garbage collected
            steps = asyncio.run(open_calls(server, stub, calls, tool))
        finally:
            server.stop()
    return {"label": label, "steps": steps, "mb_per_call": round(slope(steps), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=10, help="calls opened, 1..30")
    args = parser.parse_args()
    if not 1 <= args.calls <= 30:
        parser.error("--calls within 1..30")
    folder = Path(tempfile.mkdtemp(prefix="parley-mcp-memory-"))
    results = [
        run("no MCP", {}, args.calls, None, folder),
        run("3 MCP servers", {"mcp_servers": mcp_settings()}, args.calls, "add", folder),
    ]
    print(json.dumps(results, indent=2))
    print()
    print("| configuration | calls | server RSS MB (0 → N calls) | MB per call | MCP processes "
          "(0 → N calls) | MCP RSS MB |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        first, last = r["steps"][0], r["steps"][-1]
        print(f"| {r['label']} | {last['calls']} | {first['server_rss_mb']} → "
              f"{last['server_rss_mb']} | {r['mb_per_call']} | {first['mcp_processes']} → "
              f"{last['mcp_processes']} | {last['mcp_rss_mb']} |")  # fmt: skip


if __name__ == "__main__":
    main()
