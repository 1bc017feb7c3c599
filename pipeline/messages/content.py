"""The typed contents of user and assistant messages: text, images, audio, thinking, tool
calls and tool results."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pipeline.messages.mime import b64, b64_prefix, sniff_mime


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
                out.append((b64(image), sniff_mime(image, "image")))
            elif image.startswith("data:") and ";base64," in image:
                header, data = image.split(",", 1)
                out.append((data, header[5:].split(";", 1)[0]))
            elif "://" in image:
                out.append((image, ""))
            else:
                out.append((image, sniff_mime(b64_prefix(image), "image")))
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
                out.append((b64(clip), sniff_mime(clip, "audio")))
            else:
                out.append((clip, sniff_mime(b64_prefix(clip), "audio")))
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
