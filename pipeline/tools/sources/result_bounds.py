"""The bounds of a result a tool source hands the LLM: its size and its nesting.

An HTTP endpoint's body and an MCP server's result are written by someone else, and go
into the context, into every LLM request after it, into the store and into the client's
``llm-function-call-result`` message. So each is bounded the same way, here:

- **Size**: at most :data:`MAX_RESULT_BYTES` of text (UTF-8). Longer text is cut at a
  character boundary and ends with a line saying so, which the LLM can read and tell the
  user; a JSON value whose encoding is longer is given as its text, cut (cut JSON does
  not parse, so it is not handed on as a value).
- **Depth**: a JSON value nested deeper than :data:`MAX_RESULT_DEPTH` levels is given as
  its text. Deeper than any real result needs, it would only cost: pydantic refuses to
  serialize past 255 levels, Python's ``json`` runs out of stack past about 1,000, and a
  client's JSON is refused past 32 (``server.guards.client_json``).

Pure functions; :mod:`pipeline.tools.sources.http` and
:mod:`pipeline.tools.sources.mcp_results` use them.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_RESULT_BYTES", "MAX_RESULT_DEPTH", "bounded", "cut", "fits", "marked"]

MAX_RESULT_BYTES = 64 * 1024
MAX_RESULT_DEPTH = 32


def marked(text: str, limit: int = MAX_RESULT_BYTES) -> str:
    """``text``, already cut at ``limit`` bytes, with the line that says so."""
    return f"{text}\n[truncated: the response was longer than {limit} bytes]"


def fits(text: str, limit: int = MAX_RESULT_BYTES) -> bool:
    """Whether ``text`` is at most ``limit`` bytes of UTF-8."""
    # Counted in characters first: a huge text is never encoded whole.
    return len(text) <= limit and len(_utf8(text)) <= limit


def cut(text: str, limit: int = MAX_RESULT_BYTES) -> str:
    """``text`` if it :func:`fits`, else its first ``limit`` bytes (whole characters),
    :func:`marked`."""
    if fits(text, limit):
        return text
    return marked(_utf8(text[:limit])[:limit].decode("utf-8", "ignore"), limit)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # JSON may carry a lone surrogate


def bounded(value: Any, text: str | None = None) -> Any:
    """``value`` itself if it is within both bounds; else ``text`` (what the source sent
    as text; by default the value's JSON), :func:`cut`."""
    if isinstance(value, str):
        return cut(value)
    # Walked first: a value far over the bound is not encoded whole just to be measured.
    if _within(value, MAX_RESULT_DEPTH, MAX_RESULT_BYTES) and fits(_json(value)):
        return value
    return cut(_json(value) if text is None else text)


def _within(value: Any, depth: int, size: int) -> bool:
    """Whether ``value`` nests at most ``depth`` levels and its JSON may be at most
    ``size`` characters; without recursion, stopping at the first excess. The size
    counted is a lower bound: strings and keys with their quotes, one character for any
    other value."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    total = 0
    while pending:
        item, level = pending.pop()
        children: Any = ()
        if isinstance(item, dict):
            total += sum(len(str(key)) + 3 for key in item)
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            total += len(item) + 2 if isinstance(item, str) else 1
        if total > size or (children and level >= depth):
            return False
        pending.extend((child, level + 1) for child in children)
    return True


def _json(value: Any) -> str:
    """Compact JSON: its size is the value's, not the spacing's."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (ValueError, RecursionError):  # a cycle, or past the encoder's stack
        return f"[a {type(value).__name__} that does not encode as JSON]"
