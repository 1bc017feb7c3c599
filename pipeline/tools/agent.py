"""An agent: what the bot is told to be, what it says first, the tools it may call, and its
hooks on the call's life. An agent file defines one at module level and Parley runs it
(``PARLEY_AGENT=path/to/agent.py``)::

    from pipeline.tools.agent import Agent

    agent = Agent(instructions="You are the front desk of a bike shop.", greeting="Hi!")

    @agent.tool
    async def get_order_status(order_id: str) -> dict:
        '''Look up an order.

        Args:
            order_id: The order number the customer reads out.
        '''
        return {"status": "shipped"}

Tools follow :mod:`pipeline.tools.registry`' convention (typed parameters, a Google-style
docstring); a plain ``def`` runs in a worker thread. A parameter typed
:class:`~pipeline.tools.call_context.CallContext` gets the call's context. A tool that returns
another :class:`Agent` (or ``(agent, result)``) hands the call to it: its instructions and
tools from then on, the conversation kept.

Hooks (``async def`` or plain ``def``, each given the call's context): ``on_call_start``,
``on_user_turn`` (with the turn's text), ``on_call_end`` (with the reason), and
``on_client_message(t)`` (with the message's data; its return value is the client's
``server-response``). A hook that raises is logged; the call goes on.

``settings`` gives the file's own defaults for any ``PARLEY_*`` setting (by field name,
``{"llm_model": "gpt-4o-mini"}``, or by variable name); the environment still wins.
``instructions`` and ``greeting`` are the defaults of ``system_prompt`` and ``greeting``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, overload

from loguru import logger

from pipeline.tools.call_context import CallContext
from pipeline.tools.registry import DEFAULT_TIMEOUT_SECS, ReportLevel, ToolRegistry, ToolSpec
from pipeline.tools.sources.config import HTTPToolConfig, MCPServerConfig

F = TypeVar("F", bound=Callable[..., Any])
Hook = Callable[..., Any]


# Threads for agents' plain ``def`` tools and hooks: their own pool, so that a slow tool
# (a blocking HTTP client, a database) cannot take the threads the server itself uses.
AGENT_THREADS = 8
_pool: ThreadPoolExecutor | None = None


async def in_agent_thread(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` in the agents' thread pool, with the caller's context
    variables (the session's logging context)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(AGENT_THREADS, thread_name_prefix="agent")
    work = functools.partial(contextvars.copy_context().run, function, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_pool, work)


async def call_user_function(function: Callable[..., Any], *args: Any) -> Any:
    """Run an agent's function: awaited if it is ``async def``, else in a worker thread
    (a blocking call on the event loop would stall every session)."""
    if inspect.iscoroutinefunction(function):
        return await function(*args)
    result = await in_agent_thread(function, *args)
    if inspect.isawaitable(result):  # a def that returns a coroutine
        result = await result
    return result


class Agent:
    """Instructions, greeting, tools, hooks and setting defaults of one agent."""

    def __init__(
        self,
        instructions: str | None = None,
        greeting: str | None = None,
        *,
        name: str = "agent",
        tools: Iterable[Callable[..., Any] | ToolSpec] = (),
        settings: Mapping[str, Any] | None = None,
        mcp_servers: Iterable[MCPServerConfig | Mapping[str, Any]] = (),
        http_tools: Iterable[HTTPToolConfig | Mapping[str, Any]] = (),
    ) -> None:
        self.name = name
        self.source: str | None = None  # the file it came from (set by the loader)
        self.instructions = instructions
        self.greeting = greeting
        self.tools = ToolRegistry()
        self.settings: dict[str, Any] = dict(settings or {})
        self.mcp_servers = [MCPServerConfig.model_validate(s) for s in mcp_servers]
        self.http_tools = [HTTPToolConfig.model_validate(t) for t in http_tools]
        self.call_start_hooks: list[Hook] = []
        self.user_turn_hooks: list[Hook] = []
        self.keypad_hooks: list[Hook] = []
        self.call_end_hooks: list[Hook] = []
        self.client_message_handlers: dict[str, Hook] = {}
        for tool in tools:
            if isinstance(tool, ToolSpec):
                self.tools.register(tool)
            else:
                self.tool(tool)

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, tools={[spec.name for spec in self.tools]})"

    # -- tools -----------------------------------------------------------------------------

    @overload
    def tool(self, function: F, /) -> F: ...

    @overload
    def tool(
        self,
        function: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_SECS,
        cancel_on_interruption: bool = True,
        run_llm: bool | None = None,
        report_level: ReportLevel | None = None,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        function: F | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_SECS,
        cancel_on_interruption: bool = True,
        run_llm: bool | None = None,
        report_level: ReportLevel | None = None,
    ) -> F | Callable[[F], F]:
        """Offer the decorated function to the LLM (``@agent.tool`` or ``@agent.tool(...)``);
        the function is returned unchanged. ``cancel_on_interruption=False`` makes it an
        async tool (it survives barge-ins)."""

        def register(handler: F) -> F:
            self.tools.register(
                ToolSpec.from_function(
                    handler,
                    name=name,
                    description=description,
                    timeout=timeout,
                    cancel_on_interruption=cancel_on_interruption,
                    run_llm=run_llm,
                    report_level=report_level,
                )
            )
            return handler

        return register if function is None else register(function)

    # -- hooks -----------------------------------------------------------------------------

    def on_call_start(self, hook: F) -> F:
        """``hook(ctx)`` when a call starts (before the greeting is heard)."""
        self.call_start_hooks.append(hook)
        return hook

    def on_user_turn(self, hook: F) -> F:
        """``hook(ctx, text)`` after each user turn joins the context."""
        self.user_turn_hooks.append(hook)
        return hook

    def on_keypad(self, hook: F) -> F:
        """``hook(ctx, key)`` for each key a phone caller presses ("0"-"9", "*", "#"); the
        keys also reach the LLM as typed turns."""
        self.keypad_hooks.append(hook)
        return hook

    def on_call_end(self, hook: F) -> F:
        """``hook(ctx, reason)`` once the call has ended (its transcript complete)."""
        self.call_end_hooks.append(hook)
        return hook

    def on_client_message(self, t: str) -> Callable[[F], F]:
        """``hook(ctx, data)`` answers the client's ``client-message`` of type ``t``."""
        if not isinstance(t, str) or not t:
            raise ValueError("a client-message type must be a non-empty string")

        def register(hook: F) -> F:
            if t in self.client_message_handlers:
                raise ValueError(f"client-message {t!r} already has a handler")
            self.client_message_handlers[t] = hook
            return hook

        return register

    async def run_hooks(self, hooks: list[Hook], context: CallContext, *args: Any) -> None:
        """Run ``hooks`` in order; one that raises is logged and the next runs."""
        for hook in hooks:
            try:
                await call_user_function(hook, context, *args)
            except Exception as exc:
                name = getattr(hook, "__name__", repr(hook))
                logger.warning("agent {} hook {} failed: {!r}", self.name, name, exc)

    # -- settings --------------------------------------------------------------------------

    def setting_defaults(self) -> dict[str, Any]:
        """The settings this agent sets unless the environment does (by field name)."""
        defaults = {_field_name(key): value for key, value in self.settings.items()}
        if self.instructions is not None:
            defaults.setdefault("system_prompt", self.instructions)
        if self.greeting is not None:
            defaults.setdefault("greeting", self.greeting)
        return defaults


def handoff_target(result: Any) -> tuple[Agent, Any] | None:
    """``(agent, result for the LLM)`` when a tool's return value hands the call over."""
    if isinstance(result, Agent):
        return result, {"handoff": result.name}
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], Agent):
        return result[0], result[1]
    return None


def _field_name(key: str) -> str:
    key = key.strip()
    if key.upper().startswith("PARLEY_"):
        key = key[len("PARLEY_") :]
    return key.lower()
