"""MCP servers as a tool source: each configured server's tools in the shared registry.

Design:

- **One shared connection per server.** Every call of every session goes over the same
  MCP session (for stdio: one process). A server is a process or a remote service, not a
  per-call resource: starting one per call would cost seconds and a process each, and an
  MCP session handles concurrent requests (JSON-RPC ids) by itself.
- **A supervisor task per server owns the connection.** The SDK's transports and
  ``ClientSession`` are anyio contexts that must be entered and exited in the same task,
  and their task groups end with the connection. So one long-lived task opens the
  transport and the session, lists the tools, then waits; calls from the sessions' tool
  tasks only borrow the session. When the connection ends (a call sees it closed, a ping
  fails, the HTTP transport fails), the supervisor closes it, marks the server failing
  and connects again with exponential backoff (0.5 s doubling to 30 s); a new stdio
  process each time.
- **A server that is down never stalls a call.** Its tools stay registered; a call
  returns at once ``{"error": "MCP server <name> is unavailable (...); try again
  later"}``, and a call in flight when the connection dies returns such an error as soon
  as the SDK reports the connection closed and a ping fails (at once, on a closed
  connection; not at its timeout). A call that times out or is cancelled costs only
  itself: the SDK sends the server a cancellation and the session goes on; so does a
  call whose response broke a bound (the SDK reports that as a closed connection too,
  which the ping tells apart).
- **Bounded results.** What the LLM reads of a result is bounded as an HTTP tool's is
  (:mod:`pipeline.tools.sources.result_bounds`: 64 KB of text, 32 levels of JSON). Over
  streamable HTTP one response is also bounded as it is read, at 1 MiB decoded
  (:mod:`pipeline.tools.sources.mcp_http`); past it that call fails alone. Over stdio
  the SDK reads each line whole, with no bound to set: a stdio server is a command the
  operator chose, and what it prints is held whole until the result is cut.
- **Names.** A tool is offered under the server's name for it, made valid
  (``^[a-zA-Z0-9_-]{1,64}$``); only when that name is taken (a built-in tool, another
  server's) is it offered as ``{server}_{tool}``. At start, servers connect concurrently
  but register their tools in the configuration's order, so the first configured keeps
  a shared name. A reconnect (or ``tools/list_changed``) re-lists: new tools are
  registered, vanished ones unregistered, the rest keep their names.

Upstream API relied on (the official ``mcp`` SDK, 2.x): ``mcp.client.stdio.stdio_client``
with ``StdioServerParameters`` (``env`` merged over its ``get_default_environment()``),
``mcp.client.streamable_http.streamable_http_client`` with our own ``httpx2.AsyncClient``
(for the headers and the bounds: a response hook) and ``max_sse_event_size``;
``mcp.client.ClientSession`` (``initialize``, ``list_tools``,
``call_tool(name, arguments, read_timeout_seconds=...)``, ``send_ping``, a
``message_handler`` for ``tools/list_changed``), ``MCPError`` codes ``CONNECTION_CLOSED``
and ``REQUEST_TIMEOUT`` from ``mcp_types``, and ``CallToolResult`` (``is_error``,
``structured_content``, ``content``); the SDK turning an ``httpx2.StreamError`` while it
reads a JSON response into an error for that request.

Wiring (the server's lifespan)::

    mcp = MCPTools(settings.mcp_servers, registry)
    await mcp.start()
    ...
    await mcp.aclose()
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pipeline.tools.registry import ToolRegistry
from pipeline.tools.sources.config import MCPServerConfig
from pipeline.tools.sources.mcp_connection import MCPConnection
from pipeline.tools.sources.mcp_results import result_for_llm, tool_name

__all__ = ["MCPConnection", "MCPTools", "result_for_llm", "tool_name"]


class MCPTools:
    """Every configured MCP server; one shared connection (one process for stdio) per
    server, used by all calls."""

    def __init__(self, configs: Sequence[MCPServerConfig], registry: ToolRegistry) -> None:
        names = [config.name for config in configs]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"MCP server names must be unique: {', '.join(duplicates)}")
        self._servers: dict[str, MCPConnection] = {}
        for config in configs:
            earlier = list(self._servers.values())
            self._servers[config.name] = MCPConnection(config, registry, earlier)
        self._started = False
        self._closed = False

    async def start(self, connect_timeout: float = 10.0) -> None:
        """Start one supervisor task per server and wait (at most ``connect_timeout``) for
        each to connect and list its tools. Never raises because a server is down: a
        failing server is logged, reported by :meth:`status`, and retried in the
        background."""
        if self._started or self._closed:
            return
        self._started = True
        for server in self._servers.values():
            server.start(connect_timeout)
        waits = [server.attempted.wait() for server in self._servers.values()]
        try:
            async with asyncio.timeout(connect_timeout):
                await asyncio.gather(*waits)
        except TimeoutError:
            pass  # still connecting: status() says so, and the supervisor goes on

    def status(self) -> dict[str, dict[str, Any]]:
        """``{server: {"state", "transport", "tools", "last_error", "reconnects"}}``,
        JSON-ready, for /health. ``reconnects`` counts connections made after the first."""
        return {name: server.status() for name, server in self._servers.items()}

    def failing(self) -> list[str]:
        """Names of the servers that are not connected now (for /ready's detail)."""
        return [name for name, server in self._servers.items() if server.state != "connected"]

    async def aclose(self) -> None:
        """Stop every supervisor and close every connection and process; their tools
        leave the registry. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*(server.aclose() for server in self._servers.values()))
