"""JSON from clients: strictly JSON, and bounded in depth.

Python's ``json`` reads ``NaN`` and ``Infinity``, which JSON does not have; echoed to a
browser they make its ``JSON.parse`` fail. Depth is bounded because what a client sends
can be kept and shown to others (``requestData`` in ``GET /api/sessions``): past 255
levels pydantic refuses to serialize it, and that listing fails for every caller.
"""

from __future__ import annotations

import json
from typing import Any

# Deeper than any app's data needs, far below what the serializers can take.
MAX_DEPTH = 32


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def loads(text: str | bytes) -> Any:
    """Parse JSON, refusing ``NaN``/``Infinity``; raises ``ValueError`` (or
    ``RecursionError`` for absurd nesting)."""
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
