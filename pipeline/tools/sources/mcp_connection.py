"""One MCP server's connection: its supervisor task, its tools in the registry, its calls.

The design and the SDK API it relies on are described in :mod:`pipeline.tools.sources.mcp`.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any, Literal, TextIO, cast

import anyio
import mcp_types as types
from loguru import logger
from mcp.client import ClientSession, IncomingMessage
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT

from pipeline.tools.registry import ToolHandler, ToolRegistry, ToolSpec
from pipeline.tools.runner import error_result
from pipeline.tools.sources.config import MCPServerConfig
from pipeline.tools.sources.mcp_http import MAX_MESSAGE_BYTES, http_client
from pipeline.tools.sources.mcp_results import (
    MissingVariableError,
    expand_headers,
    object_schema,
    reason,
    result_for_llm,
    tool_name,
)

State = Literal["connecting", "connected", "failing", "closed"]

BACKOFF_FIRST = 0.5  # seconds before the first retry, doubled after each failed attempt
BACKOFF_MAX = 30.0
PING_INTERVAL = 5.0  # an idle connection is checked this often (a dead process is found)
PING_TIMEOUT = 5.0
PING_MISSES = 3  # unanswered pings in a row before a hung server is reconnected
CLOSE_TIMEOUT = 10.0  # the SDK's stdio shutdown is bounded by ~6 s (stdin, SIGTERM, SIGKILL)


def _errlog() -> TextIO:
    """A stdio server's stderr: ours, inherited (never a pipe nobody reads, which would
    stall the server once full). A stand-in stderr without a file descriptor: /dev/null."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None and stream.fileno() >= 0:
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return cast(TextIO, subprocess.DEVNULL)  # anyio's open_process takes a descriptor too


class MCPConnection:
    """One server: a supervisor task owns its connection; calls borrow the session."""

    def __init__(
        self,
        config: MCPServerConfig,
        registry: ToolRegistry,
        earlier: Sequence[MCPConnection] = (),
    ) -> None:
        self.config = config
        self.registry = registry
        # The servers configured before this one: at start their tools are registered
        # first, so the configuration's order (not connection speed) decides who keeps a
        # name two servers offer.
        self._earlier = tuple(earlier)
        self.state: State = "connecting"
        self.last_error: str | None = None
        self.reconnects = 0
        self.attempted = asyncio.Event()  # the first attempt ended, connected or not
        self._names: dict[str, str] = {}  # the server's tool name → the name offered
        self._specs: dict[str, ToolSpec] = {}  # offered name → the spec registered
        self._session: ClientSession | None = None
        self._lost: str | None = None  # why a call found the connection closed
        self._relist = False
        self._wake = asyncio.Event()
        self._scope = anyio.CancelScope()
        self._task: asyncio.Task[None] | None = None
        self._connected_once = False
        self._closing = False

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.config.command is not None else "http"

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "transport": self.transport,
            "tools": list(self._names.values()),
            "last_error": self.last_error,
            "reconnects": self.reconnects,
        }

    def start(self, connect_timeout: float) -> None:
        name = f"mcp-{self.config.name}"
        self._task = asyncio.create_task(self._supervise(connect_timeout), name=name)

    async def aclose(self) -> None:
        """Stop the supervisor (which closes the session and the process), drop the tools."""
        self._closing = True
        self._scope.cancel()  # anyio's cancellation: the SDK's shielded shutdown completes
        if self._task is not None and not self._task.done():
            done, _ = await asyncio.wait({self._task}, timeout=CLOSE_TIMEOUT)
            if not done:
                logger.warning("MCP server {}: stopping it took too long", self.config.name)
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
        for offered, spec in self._specs.items():
            if self.registry.get(offered) is spec:
                self.registry.unregister(offered)
        self._names.clear()
        self._specs.clear()
        self._session = None
        self.state = "closed"
        self.attempted.set()

    # -- calls ---------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """One call on the shared session; every failure is a result, never a stall."""
        session = self._session
        if session is None:
            return self._unavailable(self.last_error or "not connected")
        try:
            result = await session.call_tool(
                tool, arguments, read_timeout_seconds=self.config.timeout
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return error_result(f"{tool} timed out after {self.config.timeout:g}s")
            # A protocol error may mean the session is gone (an HTTP server that restarted
            # answers 404 for it), and the SDK reports one request's response stream
            # failing (an SSE event past its bound) as a closed connection: a ping tells
            # those from a bad request or a bad response.
            if not await self._alive(session):
                self._connection_lost(session, reason(exc))
                return self._unavailable(self.last_error or reason(exc))
            return error_result(f"{tool} failed: {exc.message}")
        except Exception as exc:  # a result the SDK rejects (its output schema), or the like
            logger.opt(exception=exc).warning("MCP tool {} failed", tool)
            return error_result(f"{tool} failed: {reason(exc)}")
        return result_for_llm(result)

    @staticmethod
    async def _alive(session: ClientSession) -> bool:
        """Whether the session still answers; a slow answer counts as alive (the
        supervisor's pings judge a hung server)."""
        try:
            async with asyncio.timeout(PING_TIMEOUT):
                await session.send_ping()
        except TimeoutError:
            return True
        except Exception:
            return False
        return True

    def _unavailable(self, why: str) -> dict[str, str]:
        name = self.config.name
        return error_result(f"MCP server {name} is unavailable ({why}); try again later")

    def _connection_lost(self, session: ClientSession, why: str) -> None:
        """A call saw the connection end: later calls fail at once, the supervisor
        reconnects. A call from an older session says nothing about the current one."""
        if self._session is not session:
            return
        self._session = None
        self._lost = why
        self._fail(why)
        self._wake.set()

    def _fail(self, why: str) -> None:
        if self._closing:
            return  # closing ends connections on purpose: nothing failed
        if self.state == "connected":
            logger.warning("MCP server {} lost: {}", self.config.name, why)
        self.state = "failing"
        self.last_error = why

    def _handler(self, remote: str, offered: str) -> ToolHandler:
        # ``**arguments``: the binding passes the LLM's arguments through as they are;
        # the server validates them against its own schema.
        async def handler(**arguments: Any) -> Any:
            return await self.call(remote, arguments)

        handler.__name__ = handler.__qualname__ = offered
        return handler

    # -- the supervisor ----------------------------------------------------------------

    async def _supervise(self, connect_timeout: float) -> None:
        """Connect, serve until the connection is lost, wait, again; until closed."""
        name = self.config.name
        try:
            with self._scope:
                try:
                    headers = expand_headers(self.config.headers)
                except MissingVariableError as exc:
                    logger.error("MCP server {}: {}", name, exc)
                    self._fail(str(exc))
                    return  # the environment will not change: retrying cannot help
                delay = BACKOFF_FIRST
                while True:
                    if await self._connect_once(headers, connect_timeout):
                        delay = BACKOFF_FIRST
                    self.attempted.set()
                    if self._closing:
                        return
                    why = self.last_error
                    logger.warning("MCP server {} failing ({}); retry in {:g}s", name, why, delay)
                    await anyio.sleep(delay)
                    delay = min(2 * delay, BACKOFF_MAX)
        finally:
            self.attempted.set()

    async def _connect_once(self, headers: dict[str, str], connect_timeout: float) -> bool:
        """One connection, from opening to its end; whether it got connected."""
        connected = False
        self._lost = None
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._open(stack, headers)
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=self._on_message)
                )
                try:
                    with anyio.fail_after(connect_timeout):
                        await session.initialize()
                        tools = await self._list_tools(session)
                except TimeoutError:
                    why = f"no answer within {connect_timeout:g}s"
                    self._fail(why)  # now, not after the teardown
                    raise TimeoutError(why) from None
                await self._after_earlier(connect_timeout)
                self._register(tools)
                self._connected(session)
                connected = True
                why = await self._watch(session)
                self._session = None  # calls fail at once while the connection closes
                self._fail(why)
        except Exception as exc:  # often an ExceptionGroup of the SDK's task groups
            self._fail(reason(exc))
        finally:
            self._session = None
        return connected

    async def _after_earlier(self, within: float) -> None:
        """At start, wait (a bounded time) for the servers configured before this one
        to register their tools or fail; later connections register at once."""
        if self._connected_once:
            return
        with anyio.move_on_after(within):
            for server in self._earlier:
                await server.attempted.wait()

    async def _open(self, stack: AsyncExitStack, headers: dict[str, str]) -> tuple[Any, Any]:
        """The transport's streams; everything it opened closes with ``stack``."""
        if self.config.command is not None:
            command, *args = self.config.command
            # env is added to the SDK's minimal environment (PATH, HOME, ...), not ours.
            params = StdioServerParameters(command=command, args=args, env=self.config.env)
            return await stack.enter_async_context(stdio_client(params, errlog=_errlog()))
        assert self.config.url is not None
        client = await stack.enter_async_context(http_client(headers))
        return await stack.enter_async_context(
            streamable_http_client(
                self.config.url, http_client=client, max_sse_event_size=MAX_MESSAGE_BYTES
            )
        )

    def _connected(self, session: ClientSession) -> None:
        if self._connected_once:
            self.reconnects += 1
        self._connected_once = True
        self._session = session
        self.state = "connected"
        self.last_error = None
        self.attempted.set()
        tools = ", ".join(self._names.values()) or "none"
        logger.info("MCP server {} connected; tools: {}", self.config.name, tools)

    async def _watch(self, session: ClientSession) -> str:
        """Wait while the connection is fine; return why it is not. A call that saw it
        close wakes this at once; an idle connection is pinged."""
        misses = 0
        while True:
            with anyio.move_on_after(PING_INTERVAL):
                await self._wake.wait()
            self._wake.clear()
            if self._lost is not None:
                return self._lost
            try:
                with anyio.fail_after(PING_TIMEOUT):
                    if self._relist:
                        self._relist = False
                        await self._sync_tools(session)
                    await session.send_ping()
                misses = 0
            except TimeoutError:
                misses += 1
                if misses >= PING_MISSES:
                    return f"no answer to {misses} pings"
            except Exception as exc:
                return reason(exc)

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._relist = True
            self._wake.set()
        elif isinstance(message, Exception):
            logger.debug("MCP server {}: transport error {!r}", self.config.name, message)

    # -- the tools in the registry -------------------------------------------------------

    async def _sync_tools(self, session: ClientSession) -> None:
        """List the server's tools and make the registry match."""
        self._register(await self._list_tools(session))

    @staticmethod
    async def _list_tools(session: ClientSession) -> list[types.Tool]:
        """Every page of the server's tool list."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    def _register(self, tools: list[types.Tool]) -> None:
        listed = {tool.name for tool in tools}
        for remote, gone in list(self._names.items()):
            if remote not in listed:
                logger.info("MCP server {}: tool {} is gone", self.config.name, gone)
                self._drop(remote)
        for tool in tools:
            schema = object_schema(tool.input_schema)
            if schema is None:
                logger.warning("MCP server {}: tool {} has no object schema; skipped",
                               self.config.name, tool.name)  # fmt: skip
                self._drop(tool.name)
                continue
            offered = self._names.get(tool.name) or self._claim(tool.name)
            if offered is None:
                continue
            self._drop(tool.name)  # re-registered with what the server says now
            spec = ToolSpec(
                name=offered,
                description=tool.description or "",
                parameters=schema,
                handler=self._handler(tool.name, offered),
                timeout=self.config.timeout,
            )
            self.registry.register(spec)
            self._names[tool.name] = offered
            self._specs[offered] = spec

    def _drop(self, remote: str) -> None:
        offered = self._names.pop(remote, None)
        spec = self._specs.pop(offered, None) if offered is not None else None
        if spec is not None and self.registry.get(spec.name) is spec:
            self.registry.unregister(spec.name)

    def _claim(self, remote: str) -> str | None:
        """The name a new tool is offered under: its own if valid and free, else
        ``{server}_{tool}``; None if neither can be had."""
        server = self.config.name
        name = tool_name(remote)
        if name is None:
            logger.warning("MCP server {}: tool {!r} has no usable name; skipped", server, remote)
            return None
        if name != remote:
            logger.info("MCP server {}: tool {!r} is offered as {}", server, remote, name)
        if name not in self.registry:
            return name
        prefixed = tool_name(f"{server}_{remote}")
        if prefixed is None or prefixed in self.registry:
            logger.warning("MCP server {}: tool {} clashes and {} is taken too; skipped",
                           server, name, prefixed)  # fmt: skip
            return None
        logger.info("MCP server {}: tool {} is offered as {} (the name is taken)",
                    server, remote, prefixed)  # fmt: skip
        return prefixed
