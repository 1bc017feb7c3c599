"""The LLM interface: a stream of text deltas, tool calls and usage for one context."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline.messages import Usage


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A complete tool call (the service joins the streamed argument fragments)."""

    tool_call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class UsageReport:
    usage: Usage


LLMChunk = TextDelta | ToolCallRequest | UsageReport


class LLMService(Protocol):
    """Streams one answer. Closing the iterator early (``aclose``) must close the request."""

    supports_tools: bool

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> AsyncIterator[LLMChunk]: ...


class FixedText:
    """An LLM stand-in that "answers" a given text: how the bot speaks a greeting."""

    supports_tools = False
    model = "fixed-text"

    def __init__(self, text: str) -> None:
        self.text = text

    async def stream(
        self, messages: list[dict[str, Any]], tools: Any = None, tool_choice: Any = None
    ) -> AsyncIterator[LLMChunk]:
        yield TextDelta(self.text)
