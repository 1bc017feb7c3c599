"""The one boundary between typed messages and the OpenAI chat-completions wire format.

- A :class:`CompactionSummaryMessage` *is* sent, as a ``user`` message rendered from its
  template: the summary is context given *to* the assistant, not something it said (the
  role Pipecat's summarizer uses). Other session-only messages are never sent.
- Thinking blocks are kept (with their signature) but dropped for OpenAI; an assistant
  message left with nothing visible is not sent at all.
- Wire output is canonical: a user message of exactly one text is a string, anything else
  a list of parts; so ``to_openai(from_openai(d)) == d`` holds for canonical dicts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipeline.messages import (
    _AUDIO_FORMATS,
    AssistantContent,
    AssistantMessage,
    AudioContent,
    CompactionSummaryMessage,
    DeveloperMessage,
    ImageContent,
    LLMMessage,
    Message,
    SystemMessage,
    TextContent,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    UserContent,
    UserMessage,
)

# -- to OpenAI ---------------------------------------------------------------------------


def to_openai(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """The chat-completions ``messages`` list for these messages."""
    out: list[dict[str, Any]] = []
    for message in messages:
        out.extend(message_to_openai(message))
    return out


def message_to_openai(message: Message) -> list[dict[str, Any]]:
    """One message on the wire: usually one dict, none for what the LLM must not see,
    several for a user message carrying tool results."""
    match message:
        case SystemMessage() | DeveloperMessage():
            return [{"role": message.role.value, "content": message.content}]
        case UserMessage():
            return _user_to_openai(message)
        case AssistantMessage():
            return _assistant_to_openai(message)
        case ToolMessage():
            # One wire message per result: OpenAI answers each tool call separately.
            out = [
                {"role": "tool", "tool_call_id": r.id, "content": r.content}
                for r in message.contents
            ]
            if message.name is not None and len(out) == 1:
                out[0]["name"] = message.name
            return out
        case CompactionSummaryMessage():
            return [{"role": "user", "content": message.text()}]
    return []


def _user_to_openai(message: UserMessage) -> list[dict[str, Any]]:
    # Tool results riding in a user message become OpenAI tool messages, sent first so
    # they directly follow the assistant's tool calls.
    results = [c for c in message.contents if isinstance(c, ToolResultContent)]
    wire: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": r.id, "content": r.content} for r in results
    ]
    rest = [c for c in message.contents if not isinstance(c, ToolResultContent)]
    if rest or not results:
        wire.append({"role": "user", "content": _user_content(rest)})
    return wire


def _user_content(contents: Sequence[UserContent]) -> str | list[dict[str, Any]]:
    if not contents:
        return ""
    if len(contents) == 1 and isinstance(contents[0], TextContent):
        return contents[0].content
    parts: list[dict[str, Any]] = []
    for c in contents:
        if isinstance(c, TextContent):
            parts.append({"type": "text", "text": c.content})
        elif isinstance(c, ImageContent):
            for data, mime in c.to_base64():
                url = f"data:{mime};base64,{data}" if mime else data
                parts.append({"type": "image_url", "image_url": {"url": url}})
        elif isinstance(c, AudioContent):
            for data, mime in c.to_base64():
                fmt = c.format or _AUDIO_FORMATS.get(mime, "mp3")
                parts.append({"type": "input_audio", "input_audio": {"data": data, "format": fmt}})
    return parts


def _assistant_to_openai(message: AssistantMessage) -> list[dict[str, Any]]:
    texts = [c.content for c in message.contents if isinstance(c, TextContent)]
    calls = message.tool_calls()
    if not texts and not calls:
        return []  # only thinking (or nothing): OpenAI has no place for it
    wire: dict[str, Any] = {"role": "assistant"}
    if texts:
        wire["content"] = "".join(texts)
    if calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for call in calls
        ]
    return [wire]


# -- from OpenAI -------------------------------------------------------------------------


def from_openai(wire: Mapping[str, Any]) -> LLMMessage:
    """A typed message from one chat-completions dict; ``ValueError`` if it is not one.
    Keys the layer does not model are dropped."""
    role = wire.get("role")
    content = wire.get("content")
    if role == "system":
        return SystemMessage(_plain_text(content))
    if role == "developer":
        return DeveloperMessage(_plain_text(content))
    if role == "user":
        return UserMessage(_user_contents(content))
    if role == "tool":
        call_id = wire.get("tool_call_id")
        if not isinstance(call_id, str):
            raise ValueError("a tool message needs a string tool_call_id")
        return ToolMessage(call_id, _plain_text(content), wire.get("name"))
    if role == "assistant":
        contents: list[AssistantContent] = []
        if content is not None:
            contents.append(TextContent(_plain_text(content)))
        contents.extend(_tool_call(tc) for tc in wire.get("tool_calls") or [])
        return AssistantMessage(contents)
    raise ValueError(f"not an OpenAI message role: {role!r}")


def _plain_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if p.get("type") == "text")
    raise ValueError(f"unsupported message content: {type(content).__name__}")


def _user_contents(content: Any) -> list[UserContent]:
    if isinstance(content, str):
        return [TextContent(content)]
    if not isinstance(content, list):
        raise ValueError("user content must be a string or a list of parts")
    try:
        return [_user_part(part) for part in content]
    except (AttributeError, KeyError, TypeError) as exc:
        raise ValueError(f"malformed user content part: {exc!r}") from exc


def _user_part(part: Mapping[str, Any]) -> UserContent:
    kind = part.get("type")
    if kind == "text":
        return TextContent(part["text"])
    if kind == "image_url":
        return ImageContent([part["image_url"]["url"]])
    if kind == "input_audio":
        audio = part["input_audio"]
        return AudioContent([audio["data"]], format=audio.get("format"))
    raise ValueError(f"unsupported user content part: {kind!r}")


def _tool_call(wire: Mapping[str, Any]) -> ToolCallContent:
    function = wire.get("function") or {}
    call = ToolCallContent(wire.get("id", ""), function.get("name", ""))
    raw = function.get("arguments", "")
    try:
        args = dict(raw) if isinstance(raw, Mapping) else json.loads(raw or "{}")
    except (TypeError, ValueError):
        args = None
    if isinstance(args, dict):
        call.args = args
    else:
        call.raw_arguments = str(raw)
    return call
