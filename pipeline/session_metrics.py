"""Per-session metrics: time to first byte and processing time per service, tokens, cost.

Services and the bot turn emit :class:`Metric` events; :class:`SessionMetrics` keeps
per-turn and per-session figures for the session endpoint, and :func:`rtvi_metrics`
gives the RTVI ``metrics`` message ``data`` for one measurement.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from pipeline.events import Metric
from pipeline.messages import Usage, UsageCost

# Turns kept in detail per session; older ones only count in the totals.
MAX_TURNS_KEPT = 50


@dataclass(frozen=True)
class Prices:
    """USD per million tokens. Zero (the default) for the embedded models."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0


def priced(usage: Usage, prices: Prices) -> Usage:
    """``usage`` with its cost filled in from ``prices``."""
    per = 1_000_000
    cost = UsageCost(
        input=usage.input_tokens * prices.input / per,
        output=usage.output_tokens * prices.output / per,
        cache_read=usage.cache_read_tokens * prices.cache_read / per,
        cache_write=usage.cache_write_tokens * prices.cache_write / per,
    )
    total = cost.input + cost.output + cost.cache_read + cost.cache_write
    return replace(usage, cost=replace(cost, total=total))


def usage_dict(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "cost_usd": round(usage.cost.total, 6),
    }


@dataclass
class TurnMetrics:
    """What one bot turn measured: the first TTFB per service, total processing, usage."""

    ttfb: dict[str, float] = field(default_factory=dict)
    processing: dict[str, float] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    tts_characters: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "ttfb": {k: round(v, 4) for k, v in self.ttfb.items()},
            "processing": {k: round(v, 4) for k, v in self.processing.items()},
            "usage": usage_dict(self.usage),
            "tts_characters": self.tts_characters,
        }


class SessionMetrics:
    """Accumulates one session's metrics; :meth:`end_turn` closes the current turn."""

    def __init__(self, prices: Prices | None = None) -> None:
        self.prices = prices or Prices()
        self.usage = Usage()
        self.turns: deque[TurnMetrics] = deque(maxlen=MAX_TURNS_KEPT)
        self.turn_count = 0
        self._current = TurnMetrics()
        self._ttfb: dict[str, deque[float]] = {}

    def record(self, metric: Metric) -> None:
        turn = self._current
        if metric.kind == "ttfb":
            turn.ttfb.setdefault(metric.service, float(metric.value))
            self._ttfb.setdefault(metric.service, deque(maxlen=200)).append(float(metric.value))
        elif metric.kind == "processing":
            total = turn.processing.get(metric.service, 0.0) + float(metric.value)
            turn.processing[metric.service] = total
        elif metric.kind == "tokens" and isinstance(metric.value, Usage):
            usage = priced(metric.value, self.prices)
            turn.usage = turn.usage + usage
            self.usage = self.usage + usage
        elif metric.kind == "characters":
            turn.tts_characters += int(metric.value)

    def reply_latency(self, default: float, recent: int = 20) -> float:
        """How long an answer takes from the LLM request to its first audio: the medians
        of the recent LLM and TTS times to first byte (``default`` until both are known)."""
        parts = [list(self._ttfb.get(service, ()))[-recent:] for service in ("llm", "tts")]
        if not all(parts):
            return default
        return min(2.0, sum(statistics.median(p) for p in parts))

    def end_turn(self) -> TurnMetrics:
        """Close the current turn (if it measured anything) and start a new one."""
        turn, self._current = self._current, TurnMetrics()
        if turn.ttfb or turn.processing or turn.usage.total_tokens or turn.tts_characters:
            self.turns.append(turn)
            self.turn_count += 1
        return turn

    def summary(self) -> dict[str, Any]:
        """For the session endpoint: totals, TTFB medians per service, the last turns."""
        return {
            "turns": self.turn_count,
            "usage": usage_dict(self.usage),
            "ttfb_median": {
                service: round(statistics.median(values), 4)
                for service, values in self._ttfb.items()
                if values
            },
            "last_turns": [t.as_dict() for t in list(self.turns)[-5:]],
        }


def rtvi_metrics(metric: Metric, processor: str | None = None) -> dict[str, Any]:
    """The ``data`` of an RTVI ``metrics`` message for one measurement (Pipecat's shape:
    a list per kind of ``{processor, model, value}``)."""
    name = processor or f"{metric.service}"
    entry: dict[str, Any] = {"processor": name, "value": metric.value}
    if metric.model:
        entry["model"] = metric.model
    if metric.kind == "tokens" and isinstance(metric.value, Usage):
        entry["value"] = {
            "prompt_tokens": metric.value.input_tokens,
            "completion_tokens": metric.value.output_tokens,
            "total_tokens": metric.value.total_tokens,
        }
    elif metric.kind in ("ttfb", "processing"):
        entry["value"] = round(float(metric.value), 4)
    return {metric.kind: [entry]}
