"""Function calls: the calls the LLM asks for, their progress, results and cancellation,
and messages for the client from tools or the app."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.events.event import Event


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """One tool call requested by the LLM."""

    tool_call_id: str
    function_name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    cancel_on_interruption: bool = True
    group_id: str | None = None


@dataclass(frozen=True, slots=True)
class FunctionCallsStarted(Event):
    """The LLM asked for these calls (a parallel group)."""

    calls: tuple[FunctionCall, ...]


@dataclass(frozen=True, slots=True)
class FunctionCallInProgress(Event):
    call: FunctionCall


@dataclass(frozen=True, slots=True)
class FunctionCallResult(Event):
    """A result for a call; ``is_final=False`` is an intermediate result (async tools).
    ``run_llm`` overrides whether the LLM runs again once this result is in."""

    tool_call_id: str
    function_name: str
    result: Any
    is_final: bool = True
    run_llm: bool | None = None


@dataclass(frozen=True, slots=True)
class FunctionCallCancelled(Event):
    tool_call_id: str
    function_name: str


@dataclass(frozen=True, slots=True)
class AppMessage(Event):
    """A message for the client from the app or a tool (RTVI sends it as ``server-message``)."""

    data: Any
