"""One call of a tool, as its handler sees it: its id and raw arguments, and the way to
report results (intermediate ones for async tools, then the final one) and to message the
client. The runner (:mod:`pipeline.tools.runner`) makes one per call."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.tools.call_context import CallContext

# (result, is_final, run_llm) → delivered to the conversation by the runner.
ResultSink = Callable[[Any, bool, bool | None], None]


class ToolCall:
    """One call of a tool, as its handler sees it."""

    def __init__(
        self,
        tool_call_id: str,
        function_name: str,
        arguments: dict[str, Any],
        sink: ResultSink,
        notify: Callable[[Any], None] | None = None,
        context: CallContext | None = None,
    ) -> None:
        self.tool_call_id = tool_call_id
        self.context = context  # the call's context (agents' tools), when a session runs it
        self.function_name = function_name
        self.arguments = arguments  # as the LLM sent them, before validation
        self._sink = sink
        self._notify = notify
        self._finished = False

    @property
    def finished(self) -> bool:
        """The final result has been reported."""
        return self._finished

    async def result_callback(
        self, result: Any, *, is_final: bool = True, run_llm: bool | None = None
    ) -> None:
        """Report a result: intermediate (``is_final=False``, for async tools) or final.
        ``run_llm`` overrides whether the LLM answers once it is in the context (only
        for a truthy result: an empty one never makes it answer)."""
        if self._finished:
            return  # one final result per call; late reports would confuse the context
        self._finished = is_final
        self._sink(result, is_final, run_llm)

    def send_server_message(self, data: Any) -> None:
        """Push ``data`` to the client (RTVI ``server-message``), e.g. to show progress.
        Dropped when nobody listens (no client attached)."""
        if self._notify is not None:
            self._notify(data)
