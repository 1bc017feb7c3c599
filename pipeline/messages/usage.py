"""Token usage and its cost, immutable so that it can be shared."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


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
