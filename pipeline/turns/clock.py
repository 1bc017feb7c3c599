"""Time as the turn-taking state machines see it: only what they are told.

Nothing here reads a real clock. A component's "now" is the latest time it has seen, from
an event's ``t`` or from ``advance(t)``; it never goes back. That makes every component
replayable from a scripted timeline.
"""

from __future__ import annotations

from pipeline.events import Event


def event_time(event: Event) -> float | None:
    """The event's ``t``, or ``None`` for events that carry no time (LLM, function calls)."""
    t = getattr(event, "t", None)
    return float(t) if t is not None else None


class Clock:
    """The latest time seen; :meth:`see` moves it forward, never back."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def see(self, t: float | None) -> float:
        """Move to ``t`` if it is later (``None`` keeps the time); return the new now."""
        if t is not None and t > self.now:
            self.now = t
        return self.now


def earliest(*deadlines: float | None) -> float | None:
    """The earliest of the given deadlines, ignoring ``None`` (no timer)."""
    armed = [d for d in deadlines if d is not None]
    return min(armed) if armed else None
