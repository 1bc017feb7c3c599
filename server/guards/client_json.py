"""JSON from clients: strictly JSON, and bounded in depth.

Python's ``json`` reads ``NaN`` and ``Infinity``, which JSON does not have; echoed to a
browser they make its ``JSON.parse`` fail. Depth is bounded because what a client sends
is kept, echoed and shown to others (``requestData`` in ``GET /api/sessions``, a
``client-message``'s payload in its answer): past 255 levels pydantic refuses to
serialize it, and past about 1,000 Python's own parser and serializer run out of stack.

:func:`loads` measures the nesting *before* parsing (:func:`text_depth`: brackets outside
strings, counted in C and numpy, about 1 ms for 64 KB of brackets), so a deep message is
never handed on: a bound in the reader, not a check in every consumer. Only its top-level
``id`` is read, so that the refusal answers the request (``error-response``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

# Deeper than any app's data needs, far below what the serializers can take.
MAX_DEPTH = 32

# +1 for an opening bracket, -1 for a closing one, 0 for every other byte.
_STEP = np.zeros(256, np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


class TooDeep(ValueError):
    """JSON nested deeper than allowed; ``msg_id``: the top-level ``"id"`` when it could
    be read, so that the refusal can answer the request it refuses."""

    def __init__(self, limit: int, msg_id: str | None) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels")
        self.limit = limit
        self.msg_id = msg_id


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def text_depth(text: str) -> int:
    """How deeply the JSON ``text`` nests (exact for valid JSON; invalid JSON is refused
    by the parser anyway). Linear, in C: fewer brackets than the limit skip the scan."""
    # Escapes out first (an escaped quote does not end a string), then every other piece
    # between quotes is outside the strings, where brackets nest.
    plain = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(plain.split('"')[::2]).encode("utf-8", "replace")
    steps = _STEP[np.frombuffer(outside, np.uint8)]
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))


def _id_of(text: str) -> str | None:
    """The top-level ``"id"`` of a refused message, if Python's parser can read it."""
    try:
        value = json.loads(text, parse_constant=_refuse)
    except (ValueError, RecursionError):
        return None
    msg_id = value.get("id") if isinstance(value, dict) else None
    return msg_id if isinstance(msg_id, str) else None


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON nested at most ``max_depth`` levels, refusing ``NaN``/``Infinity``;
    raises ``ValueError`` (:class:`TooDeep` for nesting)."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", "replace")
    if text.count("[") + text.count("{") > max_depth and text_depth(text) > max_depth:
        raise TooDeep(max_depth, _id_of(text))
    return json.loads(text, parse_constant=_refuse)


def depth(value: Any) -> int:
    """How deeply ``value``'s lists and objects nest (a scalar: 0), without recursion."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        level += 1
        deepest = max(deepest, level)
        pending.extend((child, level) for child in children)
    return deepest


def check_depth(value: Any, limit: int = MAX_DEPTH) -> Any:
    """``value`` itself, or ``ValueError`` if it nests deeper than ``limit`` levels."""
    if depth(value) > limit:
        raise ValueError(f"nested deeper than {limit} levels")
    return value
