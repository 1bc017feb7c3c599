"""The assistant aggregator: what the bot delivered, its tool calls, and when to answer again.

It follows one LLM response from :class:`LLMResponseStarted` to :class:`BotResponseEnded`
(or :class:`Interruption`), aggregating :class:`BotText` — text the user actually got,
so an interrupted answer holds only what was spoken — into one assistant message, with
the turn-completion marker the LLM began with (:class:`LLMMarker`), and the usage and stop
reason of :class:`LLMResponseEnded`. It keeps the function-call lifecycle in the context
(``IN_PROGRESS`` placeholder, then the result, ``COMPLETED`` for an empty one, or
``CANCELLED``; the async-tool messages for calls that survive interruptions) and decides
when the LLM must run again:

- after the last call of a parallel group completes (``run_llm`` on a non-empty result
  overrides; an empty result never makes it run);
- results arriving together (in one event-loop step) are bundled into one run;
- never while the user is speaking (their turn will ask for an answer anyway), and
  deferred until the bot stops speaking if it is.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import aclosing
from typing import Any, ClassVar

from pipeline.aggregators.text_parts import join_text
from pipeline.context.llm_context import LLMContext
from pipeline.context.summarizer import ContextSummarizer, StaleSummaryError, SummaryRequest
from pipeline.events import (
    AssistantThought,
    AssistantTranscript,
    AssistantTurnStarted,
    BotResponseEnded,
    BotStartedSpeaking,
    BotStoppedSpeaking,
    BotText,
    Event,
    FunctionCall,
    FunctionCallCancelled,
    FunctionCallInProgress,
    FunctionCallResult,
    FunctionCallsStarted,
    Interruption,
    LLMMarker,
    LLMResponseEnded,
    LLMResponseStarted,
    LLMRunRequested,
    LLMThoughtEnded,
    LLMThoughtStarted,
    LLMThoughtText,
    ServiceError,
    SummaryAppliedEvent,
    SummaryRequested,
    UserTurnDiscarded,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.events.event import now_iso
from pipeline.messages import AssistantMessage, Message, TextContent, ThinkingContent, Usage
from pipeline.reply.turn_completion import COMPLETE, strip_markers
from pipeline.services.llm import LLMService, TextDelta
from pipeline.tools import async_protocol as async_tools


def _soon(callback: Callable[[], None]) -> None:
    """Run ``callback`` after the current event-loop step (bundles simultaneous results)."""
    asyncio.get_running_loop().call_soon(callback)


def _insert_before(
    messages: list[Message], anchor: Message | None, message: Message
) -> list[Message]:
    """``messages`` with ``message`` just before ``anchor`` (at the end without one)."""
    index = next((i for i, m in enumerate(messages) if m is anchor), len(messages))
    return [*messages[:index], message, *messages[index:]]


class AssistantAggregator:
    """Builds assistant messages and drives the function-call lifecycle in the context."""

    # What :meth:`handle` follows; subscribed in this order (the conversation does it).
    EVENTS: ClassVar[tuple[type[Event], ...]] = (
        LLMResponseStarted,
        LLMMarker,
        LLMResponseEnded,
        BotText,
        BotResponseEnded,
        Interruption,
        LLMThoughtStarted,
        LLMThoughtText,
        LLMThoughtEnded,
        FunctionCallsStarted,
        FunctionCallInProgress,
        FunctionCallResult,
        FunctionCallCancelled,
        UserTurnStarted,
        UserTurnStopped,
        UserTurnDiscarded,
        BotStartedSpeaking,
        BotStoppedSpeaking,
    )

    def __init__(
        self,
        context: LLMContext,
        emit: Callable[[Event], None],
        schedule: Callable[[Callable[[], None]], None] = _soon,
        clock: Callable[[], str] = now_iso,
        summarizer: ContextSummarizer | None = None,
    ) -> None:
        self.context = context
        self.summarizer = summarizer or ContextSummarizer()
        self._emit = emit
        self._schedule = schedule
        self._clock = clock
        self._parts: list[tuple[str, bool]] = []
        self._started_at = ""
        # tool_call_id → the call once it is in progress (None while only announced)
        self._calls: dict[str, FunctionCall | None] = {}
        self._user_speaking = False
        self._bot_speaking = False
        self._run_when_bot_stops = False
        self._run_scheduled = False
        self._thought: list[tuple[str, bool]] = []
        self._thought_started = ""
        self._thought_to_context = False
        # The first tool-call message of the response being aggregated: its calls start
        # while the preamble is still spoken, and the preamble goes in before them.
        self._first_call: Message | None = None
        # Of the response being aggregated: its turn-completion marker, and what the LLM
        # used and why it stopped (set on the assistant message).
        self._marker = ""
        self._usage = Usage()
        self._stop_reason: str | None = None
        self._handlers = self._dispatch_table()

    @property
    def has_function_calls_in_progress(self) -> bool:
        return bool(self._calls)

    def handle(self, event: Event) -> None:
        """Follow one of :attr:`EVENTS` (anything else is ignored)."""
        for kind in type(event).__mro__:  # a subclass is handled as its event
            handler = self._handlers.get(kind)
            if handler is not None:
                handler(event)
                return

    def _dispatch_table(self) -> dict[type[Event], Callable[[Any], None]]:
        """The handler of each event type in :attr:`EVENTS`."""
        return {
            LLMResponseStarted: lambda _: self._turn_started(),
            LLMMarker: self._on_marker,
            LLMResponseEnded: self._on_response_ended,
            BotText: self._on_bot_text,
            BotResponseEnded: lambda _: self._turn_stopped(interrupted=False),
            Interruption: lambda _: self._interrupted(),
            LLMThoughtStarted: self._on_thought_started,
            LLMThoughtText: self._on_thought_text,
            LLMThoughtEnded: lambda event: self._thought_ended(event.signature),
            FunctionCallsStarted: self._on_calls_started,
            FunctionCallInProgress: lambda event: self._call_in_progress(event.call),
            FunctionCallResult: self._call_result,
            FunctionCallCancelled: lambda event: self._call_cancelled(event.tool_call_id),
            UserTurnStarted: lambda _: self._set_user_speaking(True),
            UserTurnStopped: lambda _: self._set_user_speaking(False),
            UserTurnDiscarded: lambda _: self._set_user_speaking(False),
            BotStartedSpeaking: lambda _: self._set_bot_speaking(True),
            BotStoppedSpeaking: lambda _: self._set_bot_speaking(False),
        }

    # -- simple events ------------------------------------------------------------------

    def _on_marker(self, event: LLMMarker) -> None:
        self._marker = event.marker

    def _on_response_ended(self, event: LLMResponseEnded) -> None:
        self._usage = event.usage or Usage()
        self._stop_reason = event.stop_reason

    def _on_bot_text(self, event: BotText) -> None:
        if event.text:
            self._parts.append((event.text, event.includes_spaces))

    def _on_thought_started(self, event: LLMThoughtStarted) -> None:
        self._thought = []
        self._thought_started = self._clock()
        self._thought_to_context = event.append_to_context

    def _on_thought_text(self, event: LLMThoughtText) -> None:
        if event.text:
            self._thought.append((event.text, True))

    def _on_calls_started(self, event: FunctionCallsStarted) -> None:
        for call in event.calls:
            self._calls[call.tool_call_id] = None

    def _set_user_speaking(self, speaking: bool) -> None:
        self._user_speaking = speaking

    def _set_bot_speaking(self, speaking: bool) -> None:
        self._bot_speaking = speaking
        if not speaking and self._run_when_bot_stops and not self._user_speaking:
            self._request_run("function call results")

    def close(self) -> None:
        """Session end (the reference's EndFrame): what was delivered so far is kept, not
        marked interrupted: ``interrupted`` means the user cut the bot off."""
        self._turn_stopped(interrupted=False)

    def cancel(self) -> None:
        """Cancellation (the reference's CancelFrame): the turn in progress is kept as
        delivered, marked interrupted."""
        self._turn_stopped(interrupted=True)

    # -- turns ------------------------------------------------------------------------

    def _turn_started(self) -> None:
        if self._started_at:
            return
        self._started_at = self._clock()
        self._emit(AssistantTurnStarted(self._started_at))

    def _turn_stopped(self, interrupted: bool) -> None:
        if not self._started_at:
            return
        delivered = join_text(self._parts)
        self._parts.clear()
        kept = self._context_text(delivered)
        if kept:
            said = AssistantMessage(
                contents=[TextContent(content=kept)],
                usage=self._usage,
                stop_reason="interrupted" if interrupted else self._stop_reason,
                interrupted=interrupted,
            )
            self.context.transform_messages(lambda ms: _insert_before(ms, self._first_call, said))
        content = strip_markers(delivered)
        self._emit(AssistantTranscript(content, interrupted, self._started_at))
        self._started_at = ""
        self._first_call = None
        self._marker, self._usage, self._stop_reason = "", Usage(), None
        if not interrupted and self.summarizer.should_summarize(self.context):
            request = self.summarizer.build_request(self.context)
            if request is not None:
                self._emit(SummaryRequested(request))

    def _context_text(self, delivered: str) -> str:
        """What the context keeps of the answer: with its turn-completion marker, as in
        the reference ("✓ <answer>"; "○" or "◐" alone for a turn left unanswered), so the
        LLM reads its own verdicts back. The transcript never has the marker."""
        if not self._marker:
            return delivered
        if not delivered:
            return "" if self._marker == COMPLETE else self._marker
        return f"{self._marker} {delivered}"

    def apply_summary(self, request: SummaryRequest, summary: str) -> bool:
        """Replace the history ``request`` covered by ``summary``; False if it went stale."""
        try:
            applied = self.summarizer.apply(self.context, request, summary)
        except (StaleSummaryError, ValueError):
            return False
        self._emit(SummaryAppliedEvent(applied))
        return True

    async def summarize(self, llm: LLMService, request: SummaryRequest) -> None:
        """Ask ``llm`` for the summary (any LLM service can: it is a plain streamed
        completion) and apply it, unless the context moved on meanwhile."""
        parts: list[str] = []
        try:
            async with aclosing(llm.stream(request.llm_messages)) as chunks:
                async for chunk in chunks:
                    if isinstance(chunk, TextDelta):
                        parts.append(chunk.text)
        except Exception as exc:
            self.summarizer.abandon()
            self._emit(ServiceError("llm", f"summarization failed: {exc}"))
            return
        summary = "".join(parts).strip()
        if not summary or not self.apply_summary(request, summary):
            self.summarizer.abandon()

    def _interrupted(self) -> None:
        self._turn_stopped(interrupted=True)
        self._run_when_bot_stops = False
        for tool_call_id, call in list(self._calls.items()):
            if call is not None and call.cancel_on_interruption:
                self._emit(FunctionCallCancelled(tool_call_id, call.function_name))
        self._thought.clear()

    def _thought_ended(self, signature: str) -> None:
        thought = join_text(self._thought)
        self._thought.clear()
        if self._thought_to_context and thought:
            content = ThinkingContent(content=thought, signature=signature)
            self.context.add_message(AssistantMessage(contents=[content]))
        self._emit(AssistantThought(thought, self._thought_started))

    # -- function calls --------------------------------------------------------------------

    def _call_in_progress(self, call: FunctionCall) -> None:
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        message = self.context.add_message(
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": call.tool_call_id,
                        "type": "function",
                        "function": {"name": call.function_name, "arguments": arguments},
                    }
                ],
            }
        )
        if call.cancel_on_interruption:
            placeholder: Any = {
                "role": "tool",
                "content": "IN_PROGRESS",
                "tool_call_id": call.tool_call_id,
            }
        else:
            placeholder = async_tools.build_started_message(call.tool_call_id)
        self.context.add_message(placeholder)
        self._calls[call.tool_call_id] = call
        if self._started_at and self._first_call is None:
            self._first_call = message

    def _call_result(self, event: FunctionCallResult) -> None:
        if event.tool_call_id not in self._calls:
            return  # not running (already cancelled, or never announced)
        call = self._calls[event.tool_call_id]
        is_async = call is not None and not call.cancel_on_interruption
        if not event.is_final:
            # An empty update ({}, [], 0, "") tells the LLM nothing (the reference drops it).
            if event.result and is_async:
                result = async_tools.encode_json(event.result)
                self.context.add_message(
                    async_tools.build_intermediate_result_message(event.tool_call_id, result)
                )
        else:
            del self._calls[event.tool_call_id]
            # As the reference: any falsy result, not only None, is "COMPLETED".
            result = async_tools.encode_result(event.result)
            if is_async:
                self.context.add_message(
                    async_tools.build_final_result_message(event.tool_call_id, result)
                )
            else:
                self.context.set_tool_result(event.tool_call_id, result)
        if self._should_run(event, call):
            self._request_run("function call results")

    def _should_run(self, event: FunctionCallResult, call: FunctionCall | None) -> bool:
        # As the reference: without a result there is nothing new for the LLM to read (a
        # bare "COMPLETED"), so it does not run, whatever ``run_llm`` says.
        if not event.result:
            return False
        if event.run_llm is not None:
            return event.run_llm
        if call is not None and call.group_id:
            # Only once no sibling of the same group is still running.
            return not any(
                other is not None and other.group_id == call.group_id
                for tool_call_id, other in self._calls.items()
                if tool_call_id != event.tool_call_id
            )
        return True

    def _call_cancelled(self, tool_call_id: str) -> None:
        call = self._calls.get(tool_call_id)
        if call is not None and call.cancel_on_interruption:
            self.context.set_tool_result(tool_call_id, "CANCELLED")
            del self._calls[tool_call_id]

    # -- running the LLM again ----------------------------------------------------------

    def _request_run(self, reason: str) -> None:
        if self._user_speaking:
            return
        if self._bot_speaking:
            self._run_when_bot_stops = True
            return
        self._run_when_bot_stops = False
        if not self._run_scheduled:
            self._run_scheduled = True
            self._schedule(lambda: self._run(reason))

    def _run(self, reason: str) -> None:
        self._run_scheduled = False
        if self._user_speaking:
            return
        self._emit(LLMRunRequested(reason))
