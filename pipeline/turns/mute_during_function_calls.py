"""Mute the user while tools run (Pipecat's ``FunctionCallUserMuteStrategy``).

Muted from ``FunctionCallsStarted`` until every call in it (and in any group started
since) has a final result or was cancelled. An intermediate result (``is_final=False``,
async tools) leaves its call running; Pipecat has no such results and counts any result.
"""

from __future__ import annotations

from pipeline.events import Event, FunctionCallCancelled, FunctionCallResult, FunctionCallsStarted
from pipeline.turns.mute import UserMuteStrategy


class MuteDuringFunctionCalls(UserMuteStrategy):
    """Muted while any started function call has no final result nor cancellation."""

    def __init__(self) -> None:
        self._running: set[str] = set()

    @property
    def muted(self) -> bool:
        return bool(self._running)

    def handle(self, event: Event) -> None:
        if isinstance(event, FunctionCallsStarted):
            self._running.update(call.tool_call_id for call in event.calls)
        elif isinstance(event, FunctionCallResult) and event.is_final:
            # discard: a result delivered twice must not fail
            self._running.discard(event.tool_call_id)
        elif isinstance(event, FunctionCallCancelled):
            self._running.discard(event.tool_call_id)
