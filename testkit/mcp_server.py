"""A small real MCP server, written with the official SDK (``MCPServer``), for the tests and
the bench of :mod:`pipeline.tools.sources.mcp`::

    python -m testkit.mcp_server --transport stdio [--name NAME] [--clash]
    python -m testkit.mcp_server --transport http --port N [--name NAME] [--clash]

HTTP is streamable HTTP at ``http://127.0.0.1:N/mcp``, bound to 127.0.0.1 only. The tools
cover what a client must cope with: a result, an ``isError`` result (``fail``), a slow
call (``slow``), a process that dies mid-call (``crash``) and structured content
(``lookup_order``), a tool list that changes (``toggle_extra``), a huge result (``blob``)
and structured content nested deep (``nested``). ``pid`` tells which process answered,
``getenv`` what environment it got. ``--clash`` adds ``get_current_time``, the name of a
built-in tool; ``--json-response`` makes the HTTP server answer each request with one JSON
body instead of an SSE stream.

:class:`HTTPServerProcess` runs the HTTP one as a subprocess for a test or a bench.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from testkit.server_process import free_port

PATH = "/mcp"
MAX_BLOB = 64 * 2**20
MAX_NESTING = 200


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


def pid() -> int:
    """The id of the server's process."""
    return os.getpid()


def getenv(name: str) -> str | None:
    """The value of an environment variable of the server's process, or null."""
    return os.environ.get(name)


async def slow(seconds: float) -> str:
    """Sleep, then say how long."""
    await asyncio.sleep(seconds)
    return f"slept {seconds:g}s"


def fail(message: str) -> str:
    """Always fails with the message (an isError result)."""
    raise ToolError(message)  # the SDK passes a ToolError's message on; others are hidden


def crash() -> str:
    """The process exits at once, without answering."""
    sys.stdout.flush()
    os._exit(1)


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id."""
    return {"order_id": order_id, "status": "shipped", "items": 2}


def blob(size: int) -> str:
    """``size`` characters of text (at most 64 MB): a result no LLM should read whole."""
    return "x" * max(0, min(size, MAX_BLOB))


def nested(depth: int) -> dict[str, Any]:
    """Structured content nested ``depth`` levels deep (at most 200)."""
    value: dict[str, Any] = {"leaf": True}
    for _ in range(max(0, min(depth, MAX_NESTING)) - 1):
        value = {"next": value}
    return value


def extra() -> str:
    """A tool that comes and goes (``toggle_extra``)."""
    return "extra"


def get_current_time() -> str:
    """The server's time (ISO 8601, UTC)."""
    return datetime.now(UTC).isoformat()


def _toggler(server: MCPServer) -> Callable[[Context], Awaitable[bool]]:
    async def toggle_extra(ctx: Context) -> bool:
        """Add the tool ``extra``, or remove it; tell the client its tools changed.
        Whether ``extra`` is offered now."""
        offered = any(tool.name == "extra" for tool in await server.list_tools())
        if offered:
            server.remove_tool("extra")
        else:
            server.add_tool(extra)
        await ctx.request_context.session.send_tool_list_changed()
        return not offered

    return toggle_extra


def build(name: str = "testkit", clash: bool = False) -> MCPServer:
    """The server with its tools; ``clash`` adds ``get_current_time``."""
    server = MCPServer(name, log_level="WARNING")
    tools: list[Callable[..., Any]] = [add, echo, pid, getenv, slow, fail, crash, lookup_order]
    tools += [blob, nested]
    tools.append(_toggler(server))
    if clash:
        tools.append(get_current_time)
    for tool in tools:
        server.tool()(tool)
    return server


class HTTPServerProcess:
    """``python -m testkit.mcp_server --transport http`` in a subprocess on 127.0.0.1;
    :meth:`start` again after :meth:`stop` brings it back on the same port."""

    def __init__(
        self, name: str = "testkit", port: int | None = None, json_response: bool = False
    ) -> None:
        self.name = name
        self.json_response = json_response
        self.port = free_port() if port is None else port
        self.url = f"http://127.0.0.1:{self.port}{PATH}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, within: float = 30.0) -> None:
        """Start it and wait until it accepts connections."""
        argv = [sys.executable, "-m", "testkit.mcp_server", "--transport", "http"]
        argv += ["--port", str(self.port), "--name", self.name]
        argv += ["--json-response"] if self.json_response else []
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"MCP server exited at start ({self.proc.returncode})")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"MCP server not listening on {self.port} after {within:g}s")

    def stop(self) -> None:
        """Kill it (as a crash would) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(10)

    def __enter__(self) -> HTTPServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--port", type=int, default=8765, help="HTTP port on 127.0.0.1")
    parser.add_argument("--name", default="testkit", help="the server's name")
    parser.add_argument("--clash", action="store_true", help="also offer get_current_time")
    parser.add_argument("--json-response", action="store_true", help="HTTP: JSON, not SSE")
    args = parser.parse_args()
    server = build(args.name, args.clash)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port,
                   streamable_http_path=PATH, json_response=args.json_response)  # fmt: skip


if __name__ == "__main__":
    main()
