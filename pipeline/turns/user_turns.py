"""One object for the session to feed: mute, then the turn controller, then idle detection.

Order per event, as in Pipecat's user aggregator: timers due before the event fire first;
mute decides from its state before the event whether to drop it; a kept event goes to the
turn controller; turn starts and stops reach the idle controller as soon as they happen;
the event then reaches the idle controller. Dropped events reach neither.

Emitted events are queued and delivered after the event that caused them has been fully
processed, so a subscriber may feed events back (e.g. an ``Interruption`` in answer to
``UserTurnStarted``): they are processed in order, and their own events delivered after.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from pipeline.events import Event
from pipeline.turns.clock import earliest, event_time
from pipeline.turns.controller import UserTurnController
from pipeline.turns.idle import UserIdleController
from pipeline.turns.mute import UserMute, UserMuteStrategy
from pipeline.turns.params import UserTurnParams
from pipeline.turns.strategy import UserTurnStartStrategy, UserTurnStopStrategy


class UserTurns:
    """The user side of turn-taking behind one ``handle(event)`` / ``advance(t)``."""

    def __init__(
        self,
        params: UserTurnParams | None = None,
        *,
        emit: Callable[[Event], None],
        start_strategies: Sequence[UserTurnStartStrategy] | None = None,
        stop_strategies: Sequence[UserTurnStopStrategy] | None = None,
        mute_strategies: Sequence[UserMuteStrategy] = (),
    ) -> None:
        self.params = params or UserTurnParams()
        self._emit_out = emit
        self._outbox: deque[Event] = deque()
        self._delivering = False
        self.mute = UserMute(mute_strategies, emit=self._outbox.append)
        self.idle = UserIdleController(self.params.user_idle_timeout, emit=self._outbox.append)
        if start_strategies is None:
            start_strategies = self.params.start_strategies()
        if stop_strategies is None:
            stop_strategies = self.params.stop_strategies()
        self.controller = UserTurnController(
            start_strategies,
            stop_strategies,
            user_turn_stop_timeout=self.params.user_turn_stop_timeout,
            emit=self._on_turn_event,
        )

    @property
    def muted(self) -> bool:
        return self.mute.muted

    @property
    def turn_active(self) -> bool:
        return self.controller.turn_active

    def next_deadline(self) -> float | None:
        """When :meth:`advance` next has a timer to fire; schedule the session's timer by it."""
        return earliest(self.controller.next_deadline(), self.idle.next_deadline())

    def handle(self, event: Event) -> bool:
        """Feed one event; True means the user is muted and the caller must drop it."""
        t = event_time(event)
        if t is not None:
            self._advance(t)
        dropped = self.mute.handle(event)
        if not dropped:
            self.controller.handle(event)
            self.idle.handle(event)
        self._deliver()
        return dropped

    def discard(self, t: float, text: str = "") -> None:
        """The turn in progress was no turn (see :meth:`UserTurnController.discard`)."""
        self.controller.discard(t, text)
        self._deliver()

    def advance(self, t: float) -> None:
        """Let time pass up to ``t``: call on every audio frame and from a periodic timer."""
        self._advance(t)
        self._deliver()

    def _advance(self, t: float) -> None:
        # Fire due timers across components in time order, each at its own deadline.
        while (due := self.next_deadline()) is not None and due <= t:
            self.controller.advance(due)
            self.idle.advance(due)
        self.mute.advance(t)
        self.controller.advance(t)
        self.idle.advance(t)

    def _on_turn_event(self, event: Event) -> None:
        self.idle.handle(event)
        self._outbox.append(event)

    def _deliver(self) -> None:
        if self._delivering:
            return  # a subscriber fed an event back; the outer loop delivers its output
        self._delivering = True
        try:
            while self._outbox:
                self._emit_out(self._outbox.popleft())
        finally:
            self._delivering = False
