"""The message dataclasses: what the LLM is sent (system, developer, user, assistant, tool)
and what only the session keeps (custom, branch summary, compaction summary)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pipeline.messages.content import (
    AssistantContent,
    AudioContent,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultContent,
    UserContent,
)
from pipeline.messages.role import Role
from pipeline.messages.usage import Usage

DEFAULT_SUMMARY_TEMPLATE = "Conversation summary: {summary}"


def _new_id() -> str:
    return uuid.uuid4().hex


@dataclass(kw_only=True)
class BaseMessage:
    role: ClassVar[Role]
    id: str = field(default_factory=_new_id)
    timestamp: float = field(default_factory=time.time)  # Unix seconds


@dataclass
class SystemMessage(BaseMessage):
    content: str = ""
    role: ClassVar[Role] = Role.SYSTEM

    @classmethod
    def text(cls, text: str) -> SystemMessage:
        return cls(text)


@dataclass
class DeveloperMessage(BaseMessage):
    content: str = ""
    role: ClassVar[Role] = Role.DEVELOPER

    @classmethod
    def text(cls, text: str) -> DeveloperMessage:
        return cls(text)


@dataclass
class UserMessage(BaseMessage):
    contents: list[UserContent] = field(default_factory=list)
    role: ClassVar[Role] = Role.USER

    @classmethod
    def text(cls, text: str) -> UserMessage:
        return cls([TextContent(text)])

    @classmethod
    def with_images(cls, text: str, images: list[str | bytes]) -> UserMessage:
        return cls([TextContent(text), ImageContent(list(images))])

    @classmethod
    def with_audio(cls, text: str, audio: list[bytes | str]) -> UserMessage:
        return cls([TextContent(text), AudioContent(list(audio))])

    def text_content(self) -> str:
        return "".join(c.content for c in self.contents if isinstance(c, TextContent))


@dataclass
class AssistantMessage(BaseMessage):
    contents: list[AssistantContent] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    interrupted: bool = False  # the user cut the bot off; contents hold what was said
    error: str = ""
    role: ClassVar[Role] = Role.ASSISTANT

    @classmethod
    def text(cls, text: str) -> AssistantMessage:
        return cls([TextContent(text)])

    def text_content(self) -> str:
        return "".join(c.content for c in self.contents if isinstance(c, TextContent))

    def tool_calls(self) -> list[ToolCallContent]:
        return [c for c in self.contents if isinstance(c, ToolCallContent)]

    def thinking(self) -> list[ThinkingContent]:
        return [c for c in self.contents if isinstance(c, ThinkingContent)]


@dataclass(init=False)
class ToolMessage(BaseMessage):
    """The results of a batch of tool calls, one :class:`ToolResultContent` per call; on
    the OpenAI wire each is a ``tool`` message of its own.

    Most hold one result: ``ToolMessage(tool_call_id, content, name)`` makes one, and
    ``tool_call_id`` / ``content`` read the first (change results through ``contents``).
    ``name`` (the function's) is sent only with a single result, the OpenAI field being
    per message.
    """

    contents: list[ToolResultContent]
    name: str | None
    role: ClassVar[Role] = Role.TOOL

    def __init__(
        self,
        tool_call_id: str = "",
        content: str = "",
        name: str | None = None,
        *,
        contents: list[ToolResultContent] | None = None,
        id: str | None = None,
        timestamp: float | None = None,
    ) -> None:
        self.id = id if id is not None else _new_id()
        self.timestamp = timestamp if timestamp is not None else time.time()
        if contents is None:
            contents = [ToolResultContent(id=tool_call_id, content=content)]
        self.contents = contents
        self.name = name

    @classmethod
    def from_results(cls, results: list[ToolResultContent]) -> ToolMessage:
        return cls(contents=list(results))

    @classmethod
    def from_result(cls, result: ToolResultContent) -> ToolMessage:
        return cls(contents=[result])

    def result_for(self, tool_call_id: str) -> ToolResultContent | None:
        """The result answering ``tool_call_id``, if this message has one."""
        return next((r for r in self.contents if r.id == tool_call_id), None)

    @property
    def tool_call_id(self) -> str:
        return self.contents[0].id if self.contents else ""

    @property
    def content(self) -> str:
        return self.contents[0].content if self.contents else ""


@dataclass
class CustomMessage(BaseMessage):
    """Extension data kept in the session (e.g. for a UI); never sent to the LLM."""

    custom_type: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    role: ClassVar[Role] = Role.CUSTOM


@dataclass
class BranchSummaryMessage(BaseMessage):
    """A summary of an abandoned branch, for session reconstruction; never sent."""

    summary: str = ""
    from_id: str = ""
    role: ClassVar[Role] = Role.BRANCH_SUMMARY


@dataclass
class CompactionSummaryMessage(BaseMessage):
    """The summary that replaced older history; sent as a ``user`` message."""

    summary: str = ""
    template: str = DEFAULT_SUMMARY_TEMPLATE  # must contain ``{summary}``
    role: ClassVar[Role] = Role.COMPACTION_SUMMARY

    def text(self) -> str:
        return self.template.format(summary=self.summary)


LLMMessage = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage
SessionMessage = CustomMessage | BranchSummaryMessage | CompactionSummaryMessage
Message = LLMMessage | SessionMessage
