"""What the embedded LLM reads: OpenAI wire messages shaped for its chat template, and
the history kept within its context.

SmolLM2-135M's template knows only system/user/assistant text
(:func:`to_chat_messages`); Qwen's takes tools, assistant tool calls and tool results
(:func:`to_tool_chat_messages`, with earlier calls written back in the model's own fenced
form). :class:`ContextWindow` trims the history to a slot's context, the tools counted,
without a tokenizer call (:func:`estimate_tokens` over-counts on purpose).
"""

from __future__ import annotations

import json
from typing import Any

# Token estimate without a tokenizer call: BPE gives ~3.7 bytes per token on English; 3
# over-counts on purpose (measured on SmolLM2: ~1.5x the real prompt on English chat),
# leaving room for text that tokenizes worse. Each message's ChatML markers come on top.
_BYTES_PER_TOKEN = 3
_MESSAGE_TOKENS = 6
RESERVED_TOKENS = 32  # the generation prompt, and the default system prompt if none
# Qwen's template wraps the tools in ~90 tokens of instructions (<tools>, <tool_call>).
_TOOLS_TEMPLATE_TOKENS = 120
# History is cut at steps of this share of the room, so after a cut the next turns keep
# the same first message (and llama.cpp's cached prompt) until they fill it again.
_REFILL_SHARE = 0.5


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # typed parts: keep the text, drop images and audio
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def to_chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """OpenAI wire messages → ``{"role", "content"}`` with system/user/assistant only.

    developer → system; a tool result → a system note naming the tool; an assistant's
    tool calls and any thinking are dropped (only its text is kept); messages left
    without text are dropped.
    """
    tool_names: dict[str, str] = {}
    out: list[dict[str, str]] = []
    for message in messages:
        role = message.get("role")
        text = _text(message.get("content")).strip()
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                name = (call.get("function") or {}).get("name")
                tool_names[call.get("id", "")] = name or "a tool"
        if role in ("system", "developer"):
            role = "system"
        elif role == "tool":
            name = message.get("name") or tool_names.get(message.get("tool_call_id", ""))
            text = f"Result of {name or 'a tool'}: {text}" if text else ""
            role = "system"
        elif role not in ("user", "assistant"):
            continue
        if text:
            out.append({"role": role, "content": text})
    return out


def to_tool_chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI wire messages → what a tool-calling template takes: system/user/assistant
    text and ``tool`` results; developer → system, thinking and images dropped.

    An assistant's *answered* tool calls (a text reply follows them) are written back the
    way the model itself writes calls (a fenced JSON object in its text, see
    :func:`fenced_calls`), not as the template's ``<tool_call>`` tags: shown tags it never
    produces, Qwen2.5-Coder stopped calling tools for the rest of the call and made
    results up ("The current time is 14:30"); shown its own form, it went on calling them
    (checked on follow-ups after a weather call: the clock and another city, both called
    with the fence, neither with the tags). The calls still waiting for their answer keep
    the tags: shown its own fence right before the result, it called the tool again, and
    again, instead of answering."""
    answered = _answered_calls(messages)
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        text = _text(message.get("content")).strip()
        if role in ("system", "developer"):
            role = "system"
        elif role == "tool":
            out.append(
                {"role": "tool", "tool_call_id": message.get("tool_call_id", ""), "content": text}
            )
            continue
        elif role == "assistant" and message.get("tool_calls") and index < answered:
            calls = fenced_calls(message["tool_calls"])
            out.append({"role": role, "content": f"{text}\n{calls}" if text else calls})
            continue
        elif role == "assistant" and message.get("tool_calls"):  # arguments: JSON strings
            out.append({"role": role, "content": text, "tool_calls": message["tool_calls"]})
            continue
        elif role not in ("user", "assistant"):
            continue
        if text:
            out.append({"role": role, "content": text})
    return out


def _answered_calls(messages: list[dict[str, Any]]) -> int:
    """Index of the last assistant message with text and no tool calls (0 if none): the
    tool calls before it were answered."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "assistant" and not message.get("tool_calls"):
            if _text(message.get("content")).strip():
                return index
    return 0


def fenced_calls(tool_calls: list[dict[str, Any]]) -> str:
    """Wire ``tool_calls`` (arguments as JSON strings) as the model writes calls: one
    ```` ```json ```` fence per call around ``{"name": …, "arguments": {…}}``."""
    fences = []
    for call in tool_calls:
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = function.get("arguments")
        body = json.dumps({"name": function.get("name"), "arguments": arguments})
        fences.append(f"```json\n{body}\n```")
    return "\n".join(fences)


def estimate_tokens(message: dict[str, Any]) -> int:
    """A safe over-estimate of a message's tokens in the prompt (its tool calls too)."""
    size = len(message["content"].encode())
    if message.get("tool_calls"):
        size += len(json.dumps(message["tool_calls"], ensure_ascii=False).encode())
    return -(-size // _BYTES_PER_TOKEN) + _MESSAGE_TOKENS


def tools_tokens(tools: list[dict[str, Any]] | None) -> int:
    """A safe over-estimate of what the tools add to the system prompt."""
    if not tools:
        return 0
    size = len(json.dumps(tools, ensure_ascii=False).encode())
    return -(-size // _BYTES_PER_TOKEN) + _TOOLS_TEMPLATE_TOKENS


def _clip(message: dict[str, Any], tokens: int, keep_end: bool) -> dict[str, Any]:
    """The message cut to ``tokens``, keeping its end (a question) or its start."""
    data = message["content"].encode()
    room = max(0, (tokens - _MESSAGE_TOKENS) * _BYTES_PER_TOKEN)
    cut = data[len(data) - room :] if keep_end else data[:room]
    return {**message, "content": cut.decode(errors="ignore")}


class ContextWindow:
    """Keeps a conversation within ``budget`` prompt tokens, dropping the oldest turns.

    Leading system messages always stay (clipped to half the budget at most). History
    is cut only at fixed steps of half the remaining room, counted from the oldest
    message: appending turns does not move those steps, so successive turns keep the
    same first message until the next step is needed, and llama.cpp reuses its cached
    prompt instead of reading the whole context again each turn. Holds no state, so
    one window serves any number of conversations.
    """

    def __init__(self, budget: int) -> None:
        if budget < 4 * _MESSAGE_TOKENS:
            raise ValueError("budget is too small for any message")
        self.budget = budget

    def fit(self, messages: list[dict[str, Any]], reserve: int = 0) -> list[dict[str, Any]]:
        """The messages that fit; ``reserve`` tokens are taken by something else in the
        prompt (the tools, rendered into the system prompt)."""
        budget = max(4 * _MESSAGE_TOKENS, self.budget - reserve)
        head_end = next((i for i, m in enumerate(messages) if m["role"] != "system"), None)
        if head_end is None:  # only system text
            return self._clip_head(messages, budget)
        head = self._clip_head(messages[:head_end], budget)
        body = messages[head_end:]
        room = budget - sum(estimate_tokens(m) for m in head)
        costs = [estimate_tokens(m) for m in body]
        if sum(costs) <= room:
            return head + body
        start = self._cut(body, costs, room)
        kept = body[start:]
        if sum(costs[start:]) > room:  # the last message alone is too long
            kept = [_clip(kept[-1], room, keep_end=True)]
        return head + kept

    @staticmethod
    def _clip_head(head: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
        # A system prompt may use at most half the budget; its start matters most.
        share = budget // 2 // max(len(head), 1)
        return [m if estimate_tokens(m) <= share else _clip(m, share, False) for m in head]

    @staticmethod
    def _cut(body: list[dict[str, Any]], costs: list[int], room: int) -> int:
        """Index of the first kept message: the first step boundary whose suffix fits,
        moved on to a user message when one is in reach (the template expects one)."""
        step = max(1, int(room * _REFILL_SHARE))
        last = len(body) - 1
        start, prefix, suffix, boundary = last, 0, sum(costs), step
        for index in range(last):
            prefix += costs[index]  # tokens before index + 1
            suffix -= costs[index]  # tokens from index + 1 on
            if prefix >= boundary:  # index + 1 is the first message past a step
                if suffix <= room:
                    start = index + 1
                    break
                boundary = (prefix // step + 1) * step
        for index in range(start, last + 1):
            if body[index]["role"] == "user":
                return index
        return start
