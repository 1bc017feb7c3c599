"""Tool calls the client executes: announced like any call, answered by the client.

A tool registered with ``client_side=True`` has no handler on the server. When the LLM
calls one, :class:`ClientToolCalls` announces it (:class:`FunctionCallInProgress`; the
transport tells the client, which runs it) and waits. The client's answer comes back
through :meth:`ClientToolCalls.resolve` and goes into the context as a
:class:`FunctionCallResult`, exactly like a server tool's, so the LLM runs on it.

No answer within the tool's ``timeout`` gives the LLM an error result it can talk about
and reports a :class:`ServiceError` (the client sees an RTVI ``error``). Answers for ids
that are unknown, finished, timed out or cancelled (barge-in) are refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from pipeline.events import (
    Emitter,
    Event,
    FunctionCall,
    FunctionCallCancelled,
    FunctionCallInProgress,
    FunctionCallResult,
    FunctionCallsStarted,
    ServiceError,
)
from pipeline.tools.registry import ToolRegistry
from pipeline.tools.runner import error_result

DEFAULT_CLIENT_TIMEOUT_SECS = 10.0


class ClientToolError(ValueError):
    """A client's answer that cannot be taken (the message is meant for the client)."""


class ClientToolCalls:
    """The client-side calls of one conversation that wait for the client's answer."""

    def __init__(
        self,
        registry: ToolRegistry,
        feed: Callable[[Event], None],
        default_timeout: float = DEFAULT_CLIENT_TIMEOUT_SECS,
    ) -> None:
        self.registry = registry
        self._feed = feed
        self.default_timeout = default_timeout
        self._open: dict[str, tuple[FunctionCall, asyncio.TimerHandle]] = {}

    def attach(self, events: Emitter) -> None:
        events.on(FunctionCallsStarted, self._start)
        events.on(FunctionCallCancelled, self._cancelled)

    @property
    def waiting(self) -> frozenset[str]:
        """Ids of the calls still waiting for the client."""
        return frozenset(self._open)

    def resolve(self, tool_call_id: str, function_name: str, result: Any) -> None:
        """The client's result for a call; raises :class:`ClientToolError` if there is
        no such call waiting."""
        entry = self._open.get(tool_call_id)
        if entry is None:
            raise ClientToolError(f"no client tool call {tool_call_id!r} is waiting for a result")
        call, timer = entry
        if function_name != call.function_name:
            raise ClientToolError(
                f"tool call {tool_call_id!r} is for {call.function_name!r}, not {function_name!r}"
            )
        del self._open[tool_call_id]
        timer.cancel()
        self._feed(FunctionCallResult(tool_call_id, call.function_name, result))

    def close(self) -> None:
        """Session end: stop waiting for anything."""
        for _, timer in self._open.values():
            timer.cancel()
        self._open.clear()

    def _start(self, event: FunctionCallsStarted) -> None:
        loop = asyncio.get_running_loop()
        for call in event.calls:
            spec = self.registry.get(call.function_name)
            if spec is None or not spec.client_side or call.tool_call_id in self._open:
                continue  # the tool runner serves (or refuses) the others
            call = dataclasses.replace(call, cancel_on_interruption=spec.cancel_on_interruption)
            timeout = spec.timeout or self.default_timeout
            timer = loop.call_later(timeout, self._timed_out, call.tool_call_id, timeout)
            self._open[call.tool_call_id] = (call, timer)
            self._feed(FunctionCallInProgress(call))

    def _cancelled(self, event: FunctionCallCancelled) -> None:
        entry = self._open.get(event.tool_call_id)
        if entry is not None and entry[0].cancel_on_interruption:
            del self._open[event.tool_call_id]
            entry[1].cancel()

    def _timed_out(self, tool_call_id: str, timeout: float) -> None:
        entry = self._open.pop(tool_call_id, None)
        if entry is None:
            return
        call = entry[0]
        message = f"the client did not run {call.function_name} within {timeout:g}s"
        self._feed(ServiceError("client tool", f"{message} (tool_call_id {tool_call_id})"))
        self._feed(FunctionCallResult(tool_call_id, call.function_name, error_result(message)))
