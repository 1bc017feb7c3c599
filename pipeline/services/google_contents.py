"""Parley's OpenAI-format context as the Gemini API's ``contents``, tools and tool config.

Pure functions over the chat-completions shapes :mod:`pipeline.context.openai_messages`
writes: system and developer messages become the ``system_instruction``; user → role
``user``, assistant → role ``model``; an assistant's ``tool_calls`` become
``function_call`` parts and tool results ``function_response`` parts (role ``user``,
named after the call they answer, since Gemini pairs them by name); data-URL images
and audio become ``inline_data``. Consecutive contents of one role are merged: Gemini
wants the turns to alternate, and parallel tool results to arrive in one turn.
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
from collections.abc import Mapping
from typing import Any

from google.genai import types

# What Gemini's function_calling_config calls OpenAI's tool_choice modes.
_MODES = {
    "auto": types.FunctionCallingConfigMode.AUTO,
    "none": types.FunctionCallingConfigMode.NONE,
    "required": types.FunctionCallingConfigMode.ANY,
}


def text_of(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if p.get("type") == "text")
    return ""


def system_instruction(messages: list[dict[str, Any]]) -> str | None:
    """The system and developer messages, joined; ``None`` when there are none."""
    texts = [
        text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    ]
    joined = "\n\n".join(t for t in texts if t)
    return joined or None


def _data_url(url: str) -> types.Part | None:
    """``data:<mime>;base64,<data>`` as an inline-data part; ``None`` if it is not one."""
    head, sep, data = url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    mime = head[len("data:") : -len(";base64")] or "application/octet-stream"
    return types.Part(inline_data=types.Blob(mime_type=mime, data=raw))


def _image(url: str) -> types.Part:
    if (part := _data_url(url)) is not None:
        return part
    # A link, not data: Gemini fetches file URIs itself; it needs a MIME type with one.
    mime = mimetypes.guess_type(url)[0] or "image/jpeg"
    return types.Part(file_data=types.FileData(file_uri=url, mime_type=mime))


def _user_parts(content: Any) -> list[types.Part]:
    if isinstance(content, str):
        return [types.Part(text=content)] if content else []
    parts: list[types.Part] = []
    for item in content if isinstance(content, list) else ():
        kind = item.get("type")
        if kind == "text" and item.get("text"):
            parts.append(types.Part(text=item["text"]))
        elif kind == "image_url":
            url = item.get("image_url", {}).get("url", "")
            if url:
                parts.append(_image(url))
        elif kind == "input_audio":
            audio = item.get("input_audio", {})
            url = f"data:audio/{audio.get('format', 'wav')};base64,{audio.get('data', '')}"
            if (part := _data_url(url)) is not None:
                parts.append(part)
    return parts


def _arguments(raw: Any) -> dict[str, Any]:
    """A tool call's JSON arguments as the object Gemini wants ({} when empty)."""
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str) or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {"arguments": raw}
    return value if isinstance(value, dict) else {"arguments": value}


def _model_parts(
    message: dict[str, Any], signatures: Mapping[str, bytes], fallback: bytes | None
) -> list[types.Part]:
    """An assistant message's text and function calls. A call's thought signature is
    the one Gemini sent with it, when known; a turn with none gets ``fallback`` on its
    first call (newer models refuse a replayed call without one)."""
    parts: list[types.Part] = []
    if text := text_of(message.get("content")):
        parts.append(types.Part(text=text))
    calls: list[types.Part] = []
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        calls.append(
            types.Part(
                function_call=types.FunctionCall(
                    id=call.get("id") or None,
                    name=function.get("name", ""),
                    args=_arguments(function.get("arguments")),
                ),
                thought_signature=signatures.get(call.get("id", "")),
            )
        )
    if calls and fallback is not None and not any(p.thought_signature for p in calls):
        calls[0].thought_signature = fallback
    return parts + calls


def _response(content: Any) -> dict[str, Any]:
    """A tool's result as a function response: its JSON object, else ``{"result": …}``."""
    text = text_of(content)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"result": text}
    return value if isinstance(value, dict) else {"result": value}


def _merged(turns: list[types.Content]) -> list[types.Content]:
    out: list[types.Content] = []
    for turn in turns:
        if not turn.parts:
            continue  # Gemini refuses a content without parts
        if out and out[-1].role == turn.role:
            out[-1].parts = [*(out[-1].parts or []), *turn.parts]
        else:
            out.append(turn)
    return out


def to_contents(
    messages: list[dict[str, Any]],
    signatures: Mapping[str, bytes] | None = None,
    fallback_signature: bytes | None = None,
) -> list[types.Content]:
    """The conversation (system messages aside) as Gemini ``contents``.

    ``signatures``: thought signatures by tool-call id, as Gemini sent them with its
    calls; ``fallback_signature``: what a model turn's calls carry when none is known.
    """
    names: dict[str, str] = {}  # tool-call id → function name, as the calls go by
    turns: list[types.Content] = []
    for message in messages:
        role = message.get("role")
        if role == "user":
            turns.append(types.Content(role="user", parts=_user_parts(message.get("content"))))
        elif role == "assistant":
            for call in message.get("tool_calls") or ():
                names[call.get("id", "")] = call.get("function", {}).get("name", "")
            parts = _model_parts(message, signatures or {}, fallback_signature)
            turns.append(types.Content(role="model", parts=parts))
        elif role == "tool":
            call_id = message.get("tool_call_id") or ""
            name = names.get(call_id) or message.get("name") or call_id
            response = types.FunctionResponse(
                id=call_id or None, name=name, response=_response(message.get("content"))
            )
            turns.append(types.Content(role="user", parts=[types.Part(function_response=response)]))
    return _merged(turns)


def to_tools(tools: list[dict[str, Any]]) -> list[types.Tool]:
    """OpenAI function tools as one Gemini tool of function declarations; the JSON
    schema of their parameters is passed as it is (``parameters_json_schema``)."""
    declarations: list[types.FunctionDeclaration] = []
    for tool in tools:
        if tool.get("type", "function") != "function" or "function" not in tool:
            continue
        function = tool["function"]
        declarations.append(
            types.FunctionDeclaration(
                name=function["name"],
                description=function.get("description") or None,
                parameters_json_schema=function.get("parameters") or None,
            )
        )
    return [types.Tool(function_declarations=declarations)] if declarations else []


def to_tool_config(tool_choice: Any) -> types.ToolConfig | None:
    """OpenAI's ``tool_choice`` ("auto", "none", "required" or a named function) as a
    Gemini tool config; ``None`` for none given (or one not understood: the default)."""
    if isinstance(tool_choice, str) and tool_choice in _MODES:
        config = types.FunctionCallingConfig(mode=_MODES[tool_choice])
    elif isinstance(tool_choice, dict) and tool_choice.get("function", {}).get("name"):
        config = types.FunctionCallingConfig(
            mode=types.FunctionCallingConfigMode.ANY,
            allowed_function_names=[tool_choice["function"]["name"]],
        )
    else:
        return None
    return types.ToolConfig(function_calling_config=config)
