"""The typed message layer: content types, messages, usage.

Everything the conversation holds is a message dataclass from this module. Only
:mod:`pipeline.context.openai_messages` turns them into chat-completions dicts and back, so no
other module builds wire dicts by hand.

- System, developer and tool messages carry a plain ``content: str`` (that is all the
  OpenAI wire format gives them); user and assistant messages carry typed ``contents``.
- Session-only messages (custom, branch summary) are never sent to the LLM; a
  :class:`CompactionSummaryMessage` is (see :mod:`pipeline.context.openai_messages`).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Literal

DEFAULT_SUMMARY_TEMPLATE = "Conversation summary: {summary}"


class Role(StrEnum):
    """Who a message is from; the last three never reach the LLM as themselves."""

    SYSTEM = "system"
    DEVELOPER = "developer"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    CUSTOM = "custom"
    BRANCH_SUMMARY = "branch_summary"
    COMPACTION_SUMMARY = "compaction_summary"


# -- media sniffing ----------------------------------------------------------------------

# Magic-byte prefixes; RIFF containers are told apart by bytes 8..12.
_MAGIC = {
    b"\xff\xd8\xff": "image/jpeg",
    b"\x89PNG": "image/png",
    b"GIF8": "image/gif",
    b"ID3": "audio/mpeg",
    b"\xff\xfb": "audio/mpeg",
    b"\xff\xf3": "audio/mpeg",
    b"\xff\xf2": "audio/mpeg",
    b"OggS": "audio/ogg",
    b"fLaC": "audio/flac",
}
_RIFF = {b"WEBP": "image/webp", b"WAVE": "audio/wav"}
# Unknown images get an obviously-wrong type so the provider rejects them loudly.
_UNKNOWN = {"image": "application/octet-stream", "audio": "audio/mpeg"}
# OpenAI's ``input_audio.format`` names, by MIME type.
_AUDIO_FORMATS = {"audio/mpeg": "mp3", "audio/wav": "wav", "audio/ogg": "ogg", "audio/flac": "flac"}


def sniff_mime(data: bytes, kind: Literal["image", "audio"]) -> str:
    """The ``kind/*`` MIME type of ``data`` from its magic bytes."""
    found = _RIFF.get(data[8:12]) if data[:4] == b"RIFF" else None
    found = found or next((m for p, m in _MAGIC.items() if data.startswith(p)), None)
    return found if found and found.startswith(kind) else _UNKNOWN[kind]


def _b64_prefix(b64: str) -> bytes:
    """The first bytes of base64 data, enough for magic-byte sniffing."""
    try:
        return base64.b64decode(b64[:32], validate=False)
    except (binascii.Error, ValueError):
        return b""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# -- content -----------------------------------------------------------------------------


@dataclass
class TextContent:
    content: str = ""
    type: Literal["text"] = field(default="text", init=False)


@dataclass
class ImageContent:
    """Images as bytes, base64 strings, ``data:`` URLs or plain URLs (sent unchanged)."""

    images: list[str | bytes] = field(default_factory=list)
    type: Literal["image"] = field(default="image", init=False)

    @classmethod
    def from_file(cls, path: str | Path) -> ImageContent:
        return cls([Path(path).read_bytes()])

    @classmethod
    def from_url(cls, url: str) -> ImageContent:
        return cls([url])

    def to_base64(self) -> list[tuple[str, str]]:
        """``(base64, mime)`` per image; a URL gives ``(url, "")``."""
        out: list[tuple[str, str]] = []
        for image in self.images:
            if isinstance(image, bytes):
                out.append((_b64(image), sniff_mime(image, "image")))
            elif image.startswith("data:") and ";base64," in image:
                header, data = image.split(",", 1)
                out.append((data, header[5:].split(";", 1)[0]))
            elif "://" in image:
                out.append((image, ""))
            else:
                out.append((image, sniff_mime(_b64_prefix(image), "image")))
        return out


@dataclass
class AudioContent:
    """Audio clips as bytes, base64 strings, or ``"file:<path>"`` (read when sent).
    ``format`` overrides the sniffed wire format (``"wav"``, ``"mp3"``...)."""

    audio: list[bytes | str] = field(default_factory=list)
    format: str | None = None
    type: Literal["audio"] = field(default="audio", init=False)

    @classmethod
    def from_file(cls, path: str | Path) -> AudioContent:
        return cls([Path(path).read_bytes()])

    @classmethod
    def from_base64(cls, data: str, format: str | None = None) -> AudioContent:
        return cls([data], format=format)

    def to_base64(self) -> list[tuple[str, str]]:
        """``(base64, mime)`` per clip."""
        out: list[tuple[str, str]] = []
        for clip in self.audio:
            if isinstance(clip, str) and clip.startswith("file:"):
                clip = Path(clip[5:]).read_bytes()
            if isinstance(clip, bytes):
                out.append((_b64(clip), sniff_mime(clip, "audio")))
            else:
                out.append((clip, sniff_mime(_b64_prefix(clip), "audio")))
        return out


@dataclass
class ThinkingContent:
    content: str = ""
    signature: str = ""  # opaque; must be re-sent verbatim to providers that use it
    type: Literal["thinking"] = field(default="thinking", init=False)


@dataclass
class ToolCallContent:
    """A tool the LLM asked for. ``raw_arguments`` keeps arguments the LLM sent that were
    not a JSON object, so they are re-sent as they came instead of being lost."""

    id: str = ""
    name: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    kind: str | None = None  # a hint for UIs; never sent
    raw_arguments: str | None = None
    type: Literal["tool_call"] = field(default="tool_call", init=False)

    def arguments_json(self) -> str:
        if self.raw_arguments is not None:
            return self.raw_arguments
        return json.dumps(self.args, ensure_ascii=False)


@dataclass
class ToolResultContent:
    id: str = ""  # the tool call's id
    content: str = ""
    is_error: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)  # internal only, never sent
    terminate: bool = False  # hint to skip the follow-up LLM run; never sent
    type: Literal["tool_result"] = field(default="tool_result", init=False)


UserContent = TextContent | ImageContent | AudioContent | ToolResultContent
AssistantContent = TextContent | ThinkingContent | ToolCallContent
Content = UserContent | AssistantContent


# -- usage -------------------------------------------------------------------------------


def _sum(a: Any, b: Any) -> Any:
    """Field-wise sum of two instances of the same dataclass."""
    return type(a)(*(getattr(a, f.name) + getattr(b, f.name) for f in fields(a)))


@dataclass(frozen=True)
class UsageCost:
    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    total: float = 0.0

    def __add__(self, other: UsageCost) -> UsageCost:
        return _sum(self, other)

    add = __add__  # a new value: usage is immutable so it can be shared


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: UsageCost = field(default_factory=UsageCost)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return _sum(self, other)

    add = __add__


# -- messages ----------------------------------------------------------------------------


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
