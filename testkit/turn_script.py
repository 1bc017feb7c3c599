"""Scripted timelines for the turn-taking state machines: events and clock ticks, no sleeping."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Protocol, cast

from pipeline.events import Event

# A script item is an event to handle, or a number: the time to advance the clock to.
Step = Event | float


class Driven(Protocol):
    def handle(self, event: Event) -> object: ...

    def advance(self, t: float) -> None: ...


def play(component: Driven, script: Iterable[Step]) -> list[Event]:
    """Feed ``script`` to ``component``; return the events it handled and were dropped."""
    dropped: list[Event] = []
    for step in script:
        if isinstance(step, Event):
            if component.handle(step) is True:
                dropped.append(step)
        else:
            component.advance(step)
    return dropped


def rounded(events: Iterable[Event], digits: int = 9) -> list[Event]:
    """``events`` with times rounded, so 1.2 + 0.6 compares equal to 1.8."""
    out: list[Event] = []
    for event in events:
        t = getattr(event, "t", None)
        # cast: ``t`` is a field of the event's own class (Event itself declares none).
        timed = cast(Any, event)
        out.append(event if t is None else dataclasses.replace(timed, t=round(t, digits)))
    return out
