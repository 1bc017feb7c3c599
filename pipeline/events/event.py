"""The base of every event, the emitter that delivers events to their subscribers, and the
wall-clock timestamps events and messages carry."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every event."""


E = TypeVar("E", bound=Event)


class Emitter:
    """Synchronous publish/subscribe by event type.

    Handlers run in subscription order, inside ``emit``; they must be quick and must not
    block (start a task for anything slow). An event emitted by a handler is delivered
    after the current one has reached all its handlers, so order is preserved.

    With ``on_error`` set, a handler that raises costs only its own call: ``on_error``
    hears of it and the event still reaches the handlers after it. A session sets it
    (``emit`` runs inside aiortc's callbacks, where an exception ends the call); without
    it the exception propagates, so that a unit test sees it.
    """

    def __init__(self) -> None:
        self._handlers: dict[type[Event], list[Callable[[Any], object]]] = defaultdict(list)
        self._pending: list[Event] = []
        self._delivering = False
        self.on_error: Callable[[Exception, Event], None] | None = None

    def on(self, event_type: type[E], handler: Callable[[E], object]) -> None:
        """Call ``handler`` for every event of exactly ``event_type`` (what it returns is
        ignored)."""
        self._handlers[event_type].append(handler)

    def emit(self, event: Event) -> None:
        self._pending.append(event)
        if self._delivering:
            return
        self._delivering = True
        try:
            while self._pending:
                current = self._pending.pop(0)
                for handler in self._handlers.get(type(current), ()):
                    try:
                        handler(current)
                    except Exception as exc:
                        if self.on_error is None:
                            raise
                        self.on_error(exc, current)
        finally:
            self._delivering = False
            self._pending.clear()


def now_iso() -> str:
    """Wall-clock time as ISO 8601 (UTC), as transcripts and RTVI messages carry it."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")
