"""Context summarization: when to compress older history, what to send to an LLM for the
summary, and how to put the summary in place. The LLM call itself lives elsewhere.

Shape after a summary: ``[leading system message(s)] + [summary] + [recent messages]``.
The summary is a :class:`~pipeline.messages.CompactionSummaryMessage` (sent as ``user``).

Rules (modelled on Pipecat's ``LLMContextSummarizer``):

- The leading system message(s) are never summarized; later system messages are.
- The last ``keep_last`` messages are kept, and the cut moves earlier when it would part
  an assistant tool call from its results, or when a call has no result yet (no tool
  message, or still ``IN_PROGRESS``): that call and everything after it is kept. An
  async tool's ``started`` message does complete the pair, so a long-running task does
  not hold back summarization; its later developer-message results stand on their own.
- Auto-trigger (off by default): estimated tokens after the system head reach
  ``max_context_tokens``, or the messages since the last summary (or the head) reach
  ``max_unsummarized_messages``; and only if summarizing would make progress (something
  the LLM sees would be replaced, and not just the previous summary alone).

Stale rule: a request applies only if it is still the pending one (a newer request, or
:meth:`ContextSummarizer.abandon`, supersedes it), and the messages it covers are still,
unchanged (same ids, same content) and in order, right after the system head, followed by
at least ``keep_last`` messages, none of which answers a tool call being summarized away.
Appending messages, and editing the system head or the kept messages, are fine.
Otherwise :class:`StaleSummaryError` is raised and the context is left as it was.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.context.llm_context import (
    TOOL_IN_PROGRESS,
    LLMContext,
    estimate_message_tokens,
    estimate_tokens,
)
from pipeline.messages import (
    DEFAULT_SUMMARY_TEMPLATE,
    AssistantMessage,
    AudioContent,
    CompactionSummaryMessage,
    DeveloperMessage,
    ImageContent,
    Message,
    SystemMessage,
    TextContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)

DEFAULT_SUMMARIZATION_PROMPT = """\
You are condensing the earlier part of a spoken conversation between a user and a voice \
assistant, so the assistant can carry on without the full transcript.

Write a short summary that keeps:
- facts, names, numbers and decisions the user gave or agreed to
- the user's goals, preferences and constraints
- tool calls that were made and what they returned, where the results still matter
- questions and tasks that are still open

Leave out greetings, filler and anything settled that will not come up again. Use plain \
factual statements and stay within the token budget. Reply with the summary only."""


@dataclass(frozen=True)
class SummarizerConfig:
    """When to summarize and how. Either threshold may be None to disable it."""

    auto_trigger: bool = False
    max_context_tokens: int | None = 8000
    max_unsummarized_messages: int | None = 20
    keep_last: int = 4
    summary_max_tokens: int = 1000  # the LLM's max_tokens for the summary
    prompt: str = DEFAULT_SUMMARIZATION_PROMPT
    summary_template: str = DEFAULT_SUMMARY_TEMPLATE

    def __post_init__(self) -> None:
        if self.max_context_tokens is None and self.max_unsummarized_messages is None:
            raise ValueError("set max_context_tokens, max_unsummarized_messages or both")
        if self.max_context_tokens is not None and self.max_context_tokens <= 0:
            raise ValueError("max_context_tokens must be positive")
        if self.max_unsummarized_messages is not None and self.max_unsummarized_messages < 1:
            raise ValueError("max_unsummarized_messages must be at least 1")
        if self.keep_last < 0:
            raise ValueError("keep_last must not be negative")
        if self.summary_max_tokens <= 0:
            raise ValueError("summary_max_tokens must be positive")
        if "{summary}" not in self.summary_template:
            raise ValueError("summary_template must contain {summary}")


@dataclass(frozen=True)
class SummaryRequest:
    """What to summarize and what to ask the LLM; hand the summary back to ``apply``."""

    request_id: str
    messages: tuple[Message, ...]  # replaced by the summary, oldest first
    prompt: str
    transcript: str
    max_tokens: int
    keep_last: int
    fingerprints: tuple[str, ...] = field(repr=False)

    @property
    def llm_messages(self) -> list[dict[str, Any]]:
        """The chat-completions messages for the summary call."""
        return [
            {"role": "system", "content": self.prompt},
            {"role": "user", "content": f"Conversation history:\n{self.transcript}"},
        ]


@dataclass(frozen=True)
class SummaryApplied:
    """What applying a summary did."""

    request_id: str
    summary: str
    summary_message: CompactionSummaryMessage
    original_message_count: int
    new_message_count: int
    summarized_message_count: int  # messages replaced by the summary
    preserved_message_count: int  # system head + recent messages kept


class StaleSummaryError(Exception):
    """The context changed in a way that conflicts with the request; nothing applied."""


class ContextSummarizer:
    """Decides on, requests and applies summaries for one context at a time."""

    def __init__(self, config: SummarizerConfig | None = None) -> None:
        self._config = config or SummarizerConfig()
        self._pending: SummaryRequest | None = None

    @property
    def config(self) -> SummarizerConfig:
        return self._config

    @property
    def pending(self) -> SummaryRequest | None:
        """The request awaiting its summary, if any."""
        return self._pending

    def should_summarize(self, context: LLMContext) -> bool:
        """Whether the auto-trigger fires now (never while a request is pending)."""
        cfg = self._config
        if not cfg.auto_trigger or self._pending is not None:
            return False
        messages = context.get_messages()
        head = head_length(messages)
        too_many_tokens = (
            cfg.max_context_tokens is not None
            and estimate_tokens(messages[head:]) >= cfg.max_context_tokens
        )
        too_many_messages = (
            cfg.max_unsummarized_messages is not None
            and _unsummarized_count(messages, head) >= cfg.max_unsummarized_messages
        )
        if not (too_many_tokens or too_many_messages):
            return False
        return _select(messages, cfg.keep_last) is not None

    def build_request(self, context: LLMContext) -> SummaryRequest | None:
        """A request for the history that can be summarized now, or None if nothing can.
        It becomes the pending request, superseding any earlier one."""
        messages = context.get_messages()
        span = _select(messages, self._config.keep_last)
        if span is None:
            return None
        covered = tuple(messages[span[0] : span[1]])
        request = SummaryRequest(
            request_id=uuid.uuid4().hex,
            messages=covered,
            prompt=self._config.prompt,
            transcript=format_transcript(covered),
            max_tokens=self._config.summary_max_tokens,
            keep_last=self._config.keep_last,
            fingerprints=tuple(_fingerprint(m) for m in covered),
        )
        self._pending = request
        return request

    def abandon(self) -> None:
        """Forget the pending request (the summary call failed or was cancelled)."""
        self._pending = None

    def apply(
        self, context: LLMContext, request: SummaryRequest, summary_text: str
    ) -> SummaryApplied:
        """Replace the request's messages with the summary (see the module's stale rule).
        The request stops being pending whatever the outcome."""
        pending, self._pending = self._pending, None
        if pending is None or pending.request_id != request.request_id:
            raise StaleSummaryError("the request was superseded, abandoned or already applied")
        summary = summary_text.strip()
        if not summary:
            raise ValueError("the summary is empty")
        messages = context.get_messages()
        head = head_length(messages)
        end = head + len(request.messages)
        if conflict := _conflict(messages, head, end, request):
            raise StaleSummaryError(conflict)
        summary_message = CompactionSummaryMessage(
            summary=summary, template=self._config.summary_template
        )
        new_messages = [*messages[:head], summary_message, *messages[end:]]
        context.set_messages(new_messages)
        return SummaryApplied(
            request_id=request.request_id,
            summary=summary,
            summary_message=summary_message,
            original_message_count=len(messages),
            new_message_count=len(new_messages),
            summarized_message_count=len(request.messages),
            preserved_message_count=len(messages) - len(request.messages),
        )


# -- selection ---------------------------------------------------------------------------


def head_length(messages: Sequence[Message]) -> int:
    """How many system messages open the conversation (the preserved prompt)."""
    count = 0
    while count < len(messages) and isinstance(messages[count], SystemMessage):
        count += 1
    return count


def _unsummarized_count(messages: Sequence[Message], head: int) -> int:
    """Messages after the latest summary, or after the system head if there is none."""
    for i in range(len(messages) - 1, head - 1, -1):
        if isinstance(messages[i], CompactionSummaryMessage):
            return len(messages) - i - 1
    return len(messages) - head


def _results(message: Message) -> list[tuple[str, str]]:
    """``(tool_call_id, content)`` of the tool results a message carries."""
    if isinstance(message, ToolMessage):
        return [(r.id, r.content) for r in message.contents]
    if isinstance(message, UserMessage):
        return [(c.id, c.content) for c in message.contents if isinstance(c, ToolResultContent)]
    return []


def _calls_by_id(messages: Sequence[Message], start: int, end: int) -> dict[str, int]:
    """The index of the assistant message making each tool call in ``[start, end)``."""
    calls: dict[str, int] = {}
    for i in range(start, end):
        message = messages[i]
        if isinstance(message, AssistantMessage):
            calls.update((call.id, i) for call in message.tool_calls())
    return calls


def _select(messages: Sequence[Message], keep_last: int) -> tuple[int, int] | None:
    """The ``[start, end)`` span to summarize, or None when that would not help."""
    start = head_length(messages)
    end = max(start, len(messages) - keep_last)
    answers = {call_id: content for m in messages[start:] for call_id, content in _results(m)}
    calls = _calls_by_id(messages, start, end)
    waiting = [
        i for cid, i in calls.items() if answers.get(cid, TOOL_IN_PROGRESS) == TOOL_IN_PROGRESS
    ]
    if waiting:
        end = min(waiting)  # a call still waiting for its result stays, with all after it
    while end > start:
        # Keep an assistant tool call with its results: pull the cut back to the call.
        calls = _calls_by_id(messages, start, end)
        split = [calls[cid] for m in messages[end:] for cid, _ in _results(m) if cid in calls]
        if not split:
            break
        end = min(split)
    visible = [m for m in messages[start:end] if estimate_message_tokens(m) > 0]
    if not visible or (len(visible) == 1 and isinstance(visible[0], CompactionSummaryMessage)):
        return None  # nothing the LLM sees would shrink
    return start, end


def _conflict(messages: Sequence[Message], head: int, end: int, request: SummaryRequest) -> str:
    """Why the request no longer fits the context, or "" if it still does."""
    covered = messages[head:end]
    if tuple(_fingerprint(m) for m in covered) != request.fingerprints:
        return "the summarized messages changed, moved or were removed"
    if len(messages) - end < request.keep_last:
        return "fewer than keep_last messages would remain after the summary"
    called = _calls_by_id(covered, 0, len(covered))
    if any(cid in called for m in messages[end:] for cid, _ in _results(m)):
        return "a kept tool result answers a tool call that would be summarized away"
    return ""


def _fingerprint(message: Message) -> str:
    # repr covers the id and every field, so any edit since the request shows up.
    return hashlib.sha256(repr(message).encode()).hexdigest()


# -- transcript --------------------------------------------------------------------------


def format_transcript(messages: Sequence[Message]) -> str:
    """The messages as a plain-text transcript for the summarizing LLM; what the LLM
    never saw (thinking, session-only messages) is left out."""
    lines: list[str] = []
    for m in messages:
        lines.extend(_transcript_lines(m))
    return "\n\n".join(lines)


def _transcript_lines(message: Message) -> list[str]:
    match message:
        case SystemMessage():
            return [f"System: {message.content}"]
        case DeveloperMessage():
            return [f"Developer: {message.content}"]
        case ToolMessage():
            return [f"Tool result [{r.id}]: {r.content}" for r in message.contents]
        case CompactionSummaryMessage():
            return [f"Summary of the conversation before this: {message.summary}"]
        case UserMessage():
            return _user_lines(message)
        case AssistantMessage():
            text = message.text_content()
            lines = [f"Assistant: {text}"] if text else []
            lines.extend(
                f"Assistant called {c.name}({c.arguments_json()}) [{c.id}]"
                for c in message.tool_calls()
            )
            return lines
    return []


def _user_lines(message: UserMessage) -> list[str]:
    """A user message: its tool results, then its words with placeholders for media."""
    parts: list[str] = []
    lines: list[str] = []
    for c in message.contents:
        if isinstance(c, TextContent):
            parts.append(c.content)
        elif isinstance(c, ImageContent):
            parts.extend("[image]" for _ in c.images)
        elif isinstance(c, AudioContent):
            parts.extend("[audio]" for _ in c.audio)
        elif isinstance(c, ToolResultContent):
            lines.append(f"Tool result [{c.id}]: {c.content}")
    if parts:
        lines.append("User: " + " ".join(parts))
    return lines
