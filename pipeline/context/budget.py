"""Keeping one conversation's context within its token budget.

The budget (``max_tokens``) bounds the history the LLM is sent: the estimated tokens of
everything after the leading system prompt (:func:`pipeline.context.llm_context.estimate_tokens`;
the prompt and the tool schemas are not counted, summarization cannot shrink them).

- **Summaries** (``summarize``): once the history reaches ``SUMMARY_AT`` of the budget,
  at the end of an answer or just before an LLM run, older history is replaced by a
  summary (:mod:`pipeline.context.summarizer`), made by the session's LLM with the summary's own
  ``max_tokens``, in a task: the conversation never waits for it. A quarter of the budget
  is left as headroom so that the summary normally lands before the limit.
- **The limit**: whenever the context grows (a user turn, typed or spoken, an answer, a
  tool result: :meth:`ContextBudget.attach`) and just before every LLM run, if the
  history is over the budget (a summary failed, is still running, went stale, or
  summaries are off), a tool result larger than half the budget is first cut to half
  (one page or dump must leave room for the question that asked for it), then the
  oldest messages are dropped until it fits; a tool result never loses its call. What
  must stay (the newest user text, or the newest call with its results) is cut to fit
  when it alone is still larger than the budget: tool results first, the largest first,
  then a user text. So
  the context is within its budget at all times, not only when an answer is due: text
  typed with ``run_immediately: false`` cannot pile up between answers.
  Growth only trims, it never starts a summary: a summary is an LLM call, and a client
  that types without asking for answers must not be able to spend those.
- **On request** (:meth:`ContextBudget.summarize_now`): a summary of what can be
  summarized now, whatever the budget (RTVI ``summarize-context``, the app API).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from loguru import logger

from pipeline.context.llm_context import (
    CHARS_PER_TOKEN,
    TOKENS_PER_MESSAGE,
    LLMContext,
    estimate_message_tokens,
    estimate_tokens,
    text_tokens,
)
from pipeline.context.summarizer import (
    ContextSummarizer,
    StaleSummaryError,
    SummarizerConfig,
    SummaryRequest,
    head_length,
)
from pipeline.events import (
    AssistantTranscript,
    BotResponseEnded,
    Emitter,
    Event,
    FunctionCallResult,
    SummaryAppliedEvent,
    UserTranscript,
)
from pipeline.messages import (
    Message,
    TextContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from pipeline.services.llm import LLMService, TextDelta
from pipeline.task_cancel import cancel_and_wait

SUMMARY_AT = 0.75  # of the budget: when a summary starts
RESULT_SHARE = 0.5  # of the budget: the most one tool result keeps once the context is over
# What a newest user text or tool result cut to fit the budget ends with.
CUT_MARK = " [… cut to fit the context budget]"
# The events after which the context holds more than before (its subscribers run first).
GROWTH = (UserTranscript, AssistantTranscript, FunctionCallResult)


@dataclass(frozen=True)
class ContextBudgetParams:
    """``max_tokens``: the history's budget (0: no limit, no automatic summary)."""

    max_tokens: int = 8000
    summarize: bool = True
    summary_max_tokens: int = 1000
    keep_last: int = 4  # recent messages a summary never replaces
    summary_timeout: float = 30.0  # seconds the summary call may take

    def summarizer_config(self) -> SummarizerConfig:
        auto = self.summarize and self.max_tokens > 0
        return SummarizerConfig(
            auto_trigger=auto,
            max_context_tokens=max(1, int(self.max_tokens * SUMMARY_AT)) if auto else 8000,
            max_unsummarized_messages=None,  # a token budget, not a message count
            keep_last=self.keep_last,
            summary_max_tokens=self.summary_max_tokens,
        )


def history_tokens(messages: Sequence[Message]) -> int:
    """Estimated tokens of the history: what follows the leading system messages."""
    return estimate_tokens(messages[head_length(messages) :])


def _is_tool_result(message: Message) -> bool:
    if isinstance(message, ToolMessage):
        return True
    return isinstance(message, UserMessage) and any(
        isinstance(c, ToolResultContent) for c in message.contents
    )


def trim_to_budget(context: LLMContext, max_tokens: int) -> int:
    """Drop the oldest history until it fits ``max_tokens``; returns how many messages
    went. Tool results over :data:`RESULT_SHARE` of the budget are cut to it first, in
    place. The newest message always stays; a tool result goes with its call (a result
    without one is refused by the provider), so the cut moves past such results, or back
    to the call when the result is the newest message. What stays and is still over the
    budget is cut to fit, in place (:func:`_fit`)."""
    messages = context.get_messages()
    head = head_length(messages)
    if max_tokens <= 0 or estimate_tokens(messages[head:]) <= max_tokens:
        return 0
    most = int(max_tokens * RESULT_SHARE)
    for result in _results(messages[head:]):
        if text_tokens(result.content) > most:
            _shorten(result, text_tokens(result.content) - most)
    sizes = [estimate_message_tokens(m) for m in messages]
    total = sum(sizes[head:])
    if total <= max_tokens:
        return 0
    last = len(messages) - 1
    cut = head
    while cut < last and total > max_tokens:
        total -= sizes[cut]
        cut += 1
    while cut < last and _is_tool_result(messages[cut]):
        cut += 1
    while cut > head and _is_tool_result(messages[cut]):
        cut -= 1
    if cut > head:
        context.set_messages([*messages[:head], *messages[cut:]])
    if sum(sizes[cut:]) > max_tokens:
        _fit(messages[cut:], max_tokens)
    return cut - head


def _fit(messages: Sequence[Message], max_tokens: int) -> None:
    """Cut what keeps the newest messages (all that the limit keeps) over the budget, in
    place (whoever holds the messages keeps them): their tool results, the largest first
    (a fetched page, an MCP dump), then a plain user text standing alone."""
    total = estimate_tokens(messages)
    for result in sorted(_results(messages), key=lambda r: len(r.content), reverse=True):
        if total <= max_tokens:
            return
        total -= _shorten(result, total - max_tokens)
    if total > max_tokens and len(messages) == 1:
        _cut_text(messages[0], max_tokens)


def _results(messages: Sequence[Message]) -> list[ToolResultContent]:
    found: list[ToolResultContent] = []
    for message in messages:
        if isinstance(message, ToolMessage | UserMessage):
            found += [c for c in message.contents if isinstance(c, ToolResultContent)]
    return found


def _shorten(result: ToolResultContent, excess: int) -> int:
    """Cut ``result``'s text by ``excess`` tokens (to the mark alone at most); returns
    the tokens it no longer costs."""
    before = text_tokens(result.content)
    keep = max(0, (before - excess) * CHARS_PER_TOKEN - len(CUT_MARK))
    if keep + len(CUT_MARK) >= len(result.content):
        return 0  # too short to gain anything by a cut
    result.content = result.content[:keep] + CUT_MARK
    return before - text_tokens(result.content)


def _cut_text(message: Message, max_tokens: int) -> None:
    """Shorten a plain user text (a paste, a monologue) that alone exceeds the budget, in
    place (whoever holds the message keeps it); anything else is left as it is."""
    if not isinstance(message, UserMessage) or len(message.contents) != 1:
        return
    text = message.contents[0]
    if not isinstance(text, TextContent):
        return
    keep = max(0, (max_tokens - TOKENS_PER_MESSAGE) * CHARS_PER_TOKEN - len(CUT_MARK))
    text.content = text.content[:keep] + CUT_MARK


class ContextBudget:
    """Summaries and the limit for one context; ``before_llm_run`` goes in the
    conversation's ``before_llm_run`` hooks; :meth:`attach` subscribes the rest."""

    def __init__(
        self,
        context: LLMContext,
        llm: LLMService,
        emit: Callable[[Event], None],
        params: ContextBudgetParams | None = None,
    ) -> None:
        self.context = context
        self.llm = llm
        self.params = params or ContextBudgetParams()
        self.summarizer = ContextSummarizer(self.params.summarizer_config())
        self._emit = emit
        self._task: asyncio.Task[dict[str, Any]] | None = None
        self.summaries = 0  # applied
        self.summary_failures = 0
        self.dropped_messages = 0  # by the limit

    def attach(self, events: Emitter) -> None:
        """Summaries at the end of answers, the limit whenever the context grew."""
        events.on(BotResponseEnded, self.answer_ended)
        for kind in GROWTH:
            events.on(kind, self.context_grew)

    def context_grew(self, _event: Event | None = None) -> None:
        """Something was added to the context: hold the limit now (no summary)."""
        self._limit()

    def answer_ended(self, _event: Event | None = None) -> None:
        """An answer went into the context: summarize if the budget says so."""
        if self.summarizer.should_summarize(self.context):
            request = self.summarizer.build_request(self.context)
            if request is not None:
                self._start(request)

    def before_llm_run(self) -> None:
        """Just before the LLM is called: start a due summary, then enforce the limit."""
        self.answer_ended()
        self._limit()

    def _limit(self) -> None:
        dropped = trim_to_budget(self.context, self.params.max_tokens)
        if dropped:
            self.dropped_messages += dropped
            logger.debug("context over its budget: the {} oldest messages dropped", dropped)

    async def summarize_now(self) -> dict[str, Any]:
        """Summarize what can be summarized now; the outcome as a JSON-ready dict
        (``status``: applied, nothing-to-summarize, stale or failed)."""
        if self._task is None or self._task.done():
            request = self.summarizer.build_request(self.context)
            if request is None:
                tokens = history_tokens(self.context.get_messages())
                return {"status": "nothing-to-summarize", "tokens_before": tokens}
            self._start(request)
        assert self._task is not None
        # shield: a caller that gives up (a request timing out) leaves the summary running.
        return await asyncio.shield(self._task)

    def info(self) -> dict[str, Any]:
        return {
            "tokens": history_tokens(self.context.get_messages()),
            "max_tokens": self.params.max_tokens,
            "summaries": self.summaries,
            "summary_failures": self.summary_failures,
            "dropped_messages": self.dropped_messages,
        }

    async def close(self) -> None:
        await cancel_and_wait([self._task])

    def _start(self, request: SummaryRequest) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._summarize(request), name="summary"
        )

    async def _summarize(self, request: SummaryRequest) -> dict[str, Any]:
        try:
            async with asyncio.timeout(self.params.summary_timeout):
                text = await self._ask(request)
        except Exception as exc:  # the limit still holds; the next answer tries again
            self.summarizer.abandon()
            self.summary_failures += 1
            logger.warning("context summary failed: {}", exc)
            return {"status": "failed", "error": str(exc) or type(exc).__name__}
        before = history_tokens(self.context.get_messages())
        try:
            applied = self.summarizer.apply(self.context, request, text)
        except (StaleSummaryError, ValueError) as exc:
            # The context moved on (or the summary was empty): dropped; tried again later.
            self.summary_failures += 1
            status = "stale" if isinstance(exc, StaleSummaryError) else "failed"
            return {"status": status, "error": str(exc)}
        self.summaries += 1
        self._emit(SummaryAppliedEvent(applied))
        return {
            "status": "applied",
            "summarized_messages": applied.summarized_message_count,
            "tokens_before": before,
            "tokens_after": history_tokens(self.context.get_messages()),
        }

    async def _ask(self, request: SummaryRequest) -> str:
        complete = getattr(self.llm, "complete", None)
        if complete is not None:  # one plain completion, bounded by the summary's budget
            return str(await complete(request.llm_messages, max_tokens=request.max_tokens))
        parts: list[str] = []
        async with aclosing(self.llm.stream(request.llm_messages)) as chunks:
            async for chunk in chunks:
                if isinstance(chunk, TextDelta):
                    parts.append(chunk.text)
        return "".join(parts)
