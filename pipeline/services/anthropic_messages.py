"""Parley's OpenAI-format context → the Anthropic Messages API's request fields.

Pure functions, no SDK. What differs from chat completions, and how it is bridged:

- System (and developer) messages are not messages there. Those that open the context
  (the prompt) become the top-level ``system``, a list of text blocks, the last one
  marked for prompt caching. Later ones (an idle check-in, an async tool's result) stay
  where they are, as ``[system]`` text in a user message: moved to the top, they would
  leave the assistant's last words at the end, which the API reads as a prefill to go on
  with, and would change the cached prompt each time.
- Roles must alternate user/assistant, starting with user: consecutive messages of a
  role are merged, tool results ride in a user message (``tool_result`` blocks, first,
  as the API requires), and a conversation that is empty or opens with the assistant
  gets a short user message first; one that ends with the assistant, a short one last.
- Every ``tool_use`` needs its ``tool_result`` in the very next message: a missing one
  is filled in, so a cut-short tool turn does not make every later request fail.
- Without tools in the request, past tool calls and results are sent as text (the API
  refuses ``tool_use`` blocks in a request that defines no tools).
- Images: data URLs become base64 blocks, http(s) URLs URL blocks; audio parts have no
  Anthropic equivalent and are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

Block = dict[str, Any]
Thoughts = Callable[[str], list[Block] | None]

CACHE = {"type": "ephemeral"}
# The first user message when the context has none before the assistant's (the API
# requires one): neutral words, so the model neither greets twice nor answers "it".
OPENING = "(The call has just started.)"
# The last user message when the context ends with the assistant's: chat completions
# answers such a context with a new message, the Messages API would continue the last.
GO_ON = "(continue)"
NO_RESULT = "(no result)"
SYSTEM_ROLES = ("system", "developer")
# Blocks the API wants first in a message: tool results (user), thinking (assistant).
_FIRST = ("tool_result", "thinking", "redacted_thinking")
# What a bare base64 image (a data URL without its header) starts with, per format.
_MAGIC = {"/9j/": "image/jpeg", "iVBOR": "image/png", "R0lGOD": "image/gif", "UklGR": "image/webp"}


def split_system(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[Block], Sequence[Mapping[str, Any]]]:
    """The opening system and developer messages as ``system`` blocks (the last one
    cached), and the messages after them."""
    start = 0
    while start < len(messages) and messages[start].get("role") in SYSTEM_ROLES:
        start += 1
    texts = (_text(m.get("content")) for m in messages[:start])
    blocks = [_text_block(text) for text in texts if text]
    if blocks:
        blocks[-1]["cache_control"] = dict(CACHE)
    return blocks, messages[start:]


def tools_param(tools: Iterable[Mapping[str, Any]]) -> list[Block]:
    """OpenAI function tools as Anthropic tools, the last one cached (the tools come
    before the system prompt in the cached prefix)."""
    out: list[Block] = []
    for tool in tools:
        function = tool.get("function") or tool
        schema = function.get("parameters") or {"type": "object", "properties": {}}
        entry: Block = {"name": function["name"], "input_schema": schema}
        if function.get("description"):
            entry["description"] = function["description"]
        out.append(entry)
    if out:
        out[-1]["cache_control"] = dict(CACHE)
    return out


def tool_choice_param(choice: Any) -> Block | None:
    """OpenAI's ``tool_choice`` as Anthropic's; ``None`` for the API's default (auto)."""
    if choice == "auto":
        return {"type": "auto"}
    if choice == "none":
        return {"type": "none"}
    if choice == "required":
        return {"type": "any"}
    if isinstance(choice, Mapping):
        name = (choice.get("function") or {}).get("name") or choice.get("name")
        if name:
            return {"type": "tool", "name": name}
    return None


def forces_tool(choice: Block | None) -> bool:
    """Whether ``choice`` makes the model call a tool (extended thinking refuses that)."""
    return choice is not None and choice["type"] in ("any", "tool")


def to_messages(
    messages: Iterable[Mapping[str, Any]], *, with_tools: bool, thoughts: Thoughts | None = None
) -> list[Block]:
    """The ``messages`` field. ``thoughts`` gives the thinking blocks that came before a
    tool call (by its id): the API wants them back with the calls when thinking is on."""
    turns: list[Block] = []
    for message in messages:
        role, blocks = _blocks(message, with_tools, thoughts)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [_text_block(OPENING)]})
    if with_tools:
        _pair_tool_results(turns)
    if turns[-1]["role"] == "assistant":
        turns.append({"role": "user", "content": [_text_block(GO_ON)]})
    for turn in turns:
        turn["content"].sort(key=lambda b: b["type"] not in _FIRST)  # stable
    return turns


def thinking_allowed(turns: Sequence[Block], choice: Block | None) -> bool:
    """Whether extended thinking may be asked for. Not with a forced tool call (the API
    refuses both at once), nor while a tool turn is open whose calls came without the
    thinking that preceded them (the API wants that thinking back, signed, first)."""
    if forces_tool(choice):
        return False
    if len(turns) < 2 or turns[-2]["role"] != "assistant":
        return True
    called = turns[-2]["content"]
    if not any(b["type"] == "tool_use" for b in called):
        return True
    return called[0]["type"] in ("thinking", "redacted_thinking")


def _blocks(
    message: Mapping[str, Any], with_tools: bool, thoughts: Thoughts | None
) -> tuple[str, list[Block]]:
    role = message.get("role")
    if role == "user":
        return "user", _user_blocks(message.get("content"))
    if role == "assistant":
        return "assistant", _assistant_blocks(message, with_tools, thoughts)
    if role == "tool":
        content = _text(message.get("content"))
        if not with_tools:
            return "user", [_text_block(f"(tool result: {content or NO_RESULT})")]
        result: Block = {"type": "tool_result", "tool_use_id": message.get("tool_call_id", "")}
        if content:  # an empty content is not allowed; none is
            result["content"] = content
        return "user", [result]
    if role in SYSTEM_ROLES and (text := _text(message.get("content"))):
        return "user", [_text_block(f"[system] {text}")]
    return "user", []


def _user_blocks(content: Any) -> list[Block]:
    if isinstance(content, str):
        return [_text_block(content)] if content else []
    blocks: list[Block] = []
    for part in content or ():
        if part.get("type") == "text" and part.get("text"):
            blocks.append(_text_block(part["text"]))
        elif part.get("type") == "image_url":
            url = (part.get("image_url") or {}).get("url", "")
            if image := image_block(url):
                blocks.append(image)
    return blocks


def _assistant_blocks(
    message: Mapping[str, Any], with_tools: bool, thoughts: Thoughts | None
) -> list[Block]:
    calls = message.get("tool_calls") or []
    blocks: list[Block] = []
    if calls and with_tools and thoughts is not None:
        blocks.extend(thoughts(calls[0].get("id", "")) or ())
    if text := _text(message.get("content")):
        blocks.append(_text_block(text))
    for call in calls:
        function = call.get("function") or {}
        name, arguments = function.get("name", ""), _arguments(function.get("arguments"))
        if with_tools:
            block = {"type": "tool_use", "id": call.get("id", ""), "name": name}
            blocks.append({**block, "input": arguments})
        else:
            blocks.append(_text_block(f"(tool call: {name} {json.dumps(arguments)})"))
    return blocks


def _pair_tool_results(turns: list[Block]) -> None:
    """Give each ``tool_use`` its ``tool_result`` in the next (user) message; a result
    whose call is not in the message before becomes text (the API refuses both)."""
    for i, turn in enumerate(turns):
        if turn["role"] != "user":
            continue
        before = turns[i - 1]["content"] if i else []
        asked = [b["id"] for b in before if b["type"] == "tool_use"]
        answered = {b["tool_use_id"] for b in turn["content"] if b["type"] == "tool_result"}
        for j, block in enumerate(turn["content"]):
            if block["type"] == "tool_result" and block["tool_use_id"] not in asked:
                text = block.get("content") or NO_RESULT
                turn["content"][j] = _text_block(f"(tool result: {text})")
        missing = [call_id for call_id in asked if call_id not in answered]
        turn["content"][:0] = [_no_result(call_id) for call_id in missing]
    calls = [b["id"] for b in turns[-1]["content"] if b["type"] == "tool_use"]
    if calls and turns[-1]["role"] == "assistant":
        turns.append({"role": "user", "content": [_no_result(c) for c in calls]})


def image_block(url: str) -> Block | None:
    """An image block for a data URL, an http(s) URL or bare base64; None otherwise."""
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        media_type = header[len("data:") :].split(";")[0] or "image/jpeg"
    else:
        data = url
        media_type = next((t for m, t in _MAGIC.items() if url.startswith(m)), "")
    if not data or not media_type:
        return None
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def _arguments(raw: Any) -> dict[str, Any]:
    """A tool call's arguments as the object ``tool_use.input`` must be."""
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        value = json.loads(raw) if raw else {}
    except (TypeError, ValueError):
        return {"arguments": str(raw)}  # kept, so the model sees what it sent
    return value if isinstance(value, dict) else {"arguments": value}


def _no_result(call_id: str) -> Block:
    return {"type": "tool_result", "tool_use_id": call_id, "content": NO_RESULT}


def _text_block(text: str) -> Block:
    return {"type": "text", "text": text}


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")
