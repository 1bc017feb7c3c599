"""The conversation context one LLM sees: typed messages, tools, tool choice, usage.

Callers may add typed messages or plain OpenAI dicts (converted once, on the way in, by
:func:`pipeline.context.openai_messages.from_openai`); the context only ever holds typed
messages, and :meth:`LLMContext.to_openai` is the way out.

Token estimate (:func:`estimate_tokens`): a deliberately cheap heuristic for thresholds,
not billing. It counts only what :func:`pipeline.context.openai_messages.to_openai` would send:
``ceil(chars / 4)`` for every text (message text, tool-call name + JSON arguments, tool
results), plus 10 tokens of framing per wire message, plus a flat 500 per image and per
audio clip (their real cost depends on size and detail, which we do not decode). Thinking
and session-only messages count 0; a compaction summary counts as its rendered text.
Tool schemas are not counted: summarization cannot shrink them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, get_args

from pipeline.context.openai_messages import from_openai, to_openai
from pipeline.messages import (
    AssistantMessage,
    AudioContent,
    BaseMessage,
    CompactionSummaryMessage,
    DeveloperMessage,
    ImageContent,
    Message,
    SystemMessage,
    TextContent,
    ToolMessage,
    ToolResultContent,
    Usage,
    UserMessage,
)

# What a tool message holds while its call runs, and the results that end it when the
# function returned nothing or the call was cancelled (Pipecat's sentinels).
TOOL_IN_PROGRESS = "IN_PROGRESS"
TOOL_COMPLETED = "COMPLETED"
TOOL_CANCELLED = "CANCELLED"

ToolChoiceMode = Literal["none", "auto", "required"]
ToolChoice = ToolChoiceMode | dict[str, Any]

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 10
TOKENS_PER_IMAGE = 500
TOKENS_PER_AUDIO_CLIP = 500


def text_tokens(text: str) -> int:
    """The estimated tokens of one text."""
    return -(-len(text) // CHARS_PER_TOKEN)  # ceil, so short texts still count


def estimate_message_tokens(message: Message) -> int:
    """The estimated prompt tokens one message costs (see the module docstring)."""
    match message:
        case SystemMessage() | DeveloperMessage():
            return TOKENS_PER_MESSAGE + text_tokens(message.content)
        case ToolMessage():  # one wire message per result
            return sum(TOKENS_PER_MESSAGE + text_tokens(r.content) for r in message.contents)
        case CompactionSummaryMessage():
            return TOKENS_PER_MESSAGE + text_tokens(message.text())
        case UserMessage():
            return _user_tokens(message)
        case AssistantMessage():
            calls = message.tool_calls()
            if not calls and not any(isinstance(c, TextContent) for c in message.contents):
                return 0  # not sent: nothing OpenAI can see
            arguments = sum(text_tokens(c.name + c.arguments_json()) for c in calls)
            return TOKENS_PER_MESSAGE + text_tokens(message.text_content()) + arguments
    return 0


def _user_tokens(message: UserMessage) -> int:
    total = 0
    results = rest = 0
    for c in message.contents:
        if isinstance(c, ToolResultContent):
            results += 1  # sent as a tool message of its own
            total += TOKENS_PER_MESSAGE + text_tokens(c.content)
            continue
        rest += 1
        if isinstance(c, TextContent):
            total += text_tokens(c.content)
        elif isinstance(c, ImageContent):
            total += TOKENS_PER_IMAGE * len(c.images)
        elif isinstance(c, AudioContent):
            total += TOKENS_PER_AUDIO_CLIP * len(c.audio)
    sends_user_message = rest > 0 or results == 0
    return total + (TOKENS_PER_MESSAGE if sends_user_message else 0)


def estimate_tokens(messages: Iterable[Message]) -> int:
    """The estimated prompt tokens of these messages."""
    return sum(estimate_message_tokens(m) for m in messages)


def as_message(message: Message | Mapping[str, Any]) -> Message:
    """A typed message, converting a plain OpenAI dict."""
    if isinstance(message, BaseMessage):
        return message
    if isinstance(message, Mapping):
        return from_openai(message)
    raise TypeError(f"not a message: {type(message).__name__}")


class LLMContext:
    """The messages, tools and tool choice for one conversation, and its usage so far.

    ``messages`` / ``get_messages()`` return a new list each time, so changing the
    conversation always goes through this class; the message objects themselves are
    shared (edit them through :meth:`set_tool_result` where possible).
    """

    def __init__(
        self,
        messages: Iterable[Message | Mapping[str, Any]] = (),
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: ToolChoice | None = None,
    ) -> None:
        self._messages: list[Message] = [as_message(m) for m in messages]
        self._tools: list[dict[str, Any]] | None = None
        self._tool_choice: ToolChoice | None = None
        self._usage = Usage()
        self.set_tools(tools)
        self.set_tool_choice(tool_choice)

    # -- messages ----------------------------------------------------------------------

    @property
    def messages(self) -> list[Message]:
        return list(self._messages)

    def get_messages(self) -> list[Message]:
        return list(self._messages)

    def add_message(self, message: Message | Mapping[str, Any]) -> Message:
        """Append one message; returns the typed message that was stored."""
        typed = as_message(message)
        self._messages.append(typed)
        return typed

    def add_messages(self, messages: Iterable[Message | Mapping[str, Any]]) -> list[Message]:
        typed = [as_message(m) for m in messages]
        self._messages.extend(typed)
        return typed

    def set_messages(self, messages: Iterable[Message | Mapping[str, Any]]) -> None:
        """Replace the whole conversation."""
        self._messages = [as_message(m) for m in messages]

    def transform_messages(
        self, transform: Callable[[list[Message]], Iterable[Message | Mapping[str, Any]]]
    ) -> None:
        """Replace the conversation with ``transform(messages)``."""
        self.set_messages(transform(self.get_messages()))

    def to_openai(self) -> list[dict[str, Any]]:
        """The messages in the chat-completions wire format."""
        return to_openai(self._messages)

    # -- tool results ------------------------------------------------------------------

    def find_tool_message(self, tool_call_id: str) -> ToolMessage | None:
        """The first tool message answering ``tool_call_id``, if any."""
        for message in self._messages:
            if isinstance(message, ToolMessage) and message.result_for(tool_call_id):
                return message
        return None

    def set_tool_result(self, tool_call_id: str, content: str) -> bool:
        """Replace the content of every tool message answering ``tool_call_id`` (e.g.
        ``IN_PROGRESS`` → the result, ``CANCELLED`` or ``COMPLETED``). Returns whether
        there was one; the message keeps its id and place in the conversation."""
        found = False
        for message in self._messages:
            if isinstance(message, ToolMessage):
                for result in message.contents:
                    if result.id == tool_call_id:
                        result.content = content
                        found = True
        return found

    # -- tools -------------------------------------------------------------------------

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """OpenAI tool schemas, or None when no tools are offered."""
        return self._tools

    def set_tools(self, tools: Iterable[dict[str, Any]] | None) -> None:
        # An empty list means "no tools": OpenAI rejects ``tools=[]``.
        self._tools = list(tools) if tools else None

    @property
    def tool_choice(self) -> ToolChoice | None:
        """``"none"`` / ``"auto"`` / ``"required"``, a named-function dict, or None for
        the provider's default."""
        return self._tool_choice

    def set_tool_choice(self, tool_choice: ToolChoice | None) -> None:
        if isinstance(tool_choice, str) and tool_choice not in get_args(ToolChoiceMode):
            raise ValueError(f"tool_choice must be none, auto, required or a dict: {tool_choice!r}")
        self._tool_choice = tool_choice

    # -- usage and size ----------------------------------------------------------------

    @property
    def usage(self) -> Usage:
        """Token usage (and cost) accumulated over the session."""
        return self._usage

    def add_usage(self, usage: Usage) -> Usage:
        """Accumulate one LLM call's usage; returns the new session total."""
        self._usage = self._usage + usage
        return self._usage

    def estimate_tokens(self) -> int:
        """Estimated prompt tokens of the messages (see the module docstring)."""
        return estimate_tokens(self._messages)
