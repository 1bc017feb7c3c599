"""Noticing that the user has gone quiet after the bot spoke (Pipecat's ``UserIdleController``).

The timer starts when the bot stops speaking, unless a user turn is in progress (a
barge-in: the bot stops while the user talks on) or function calls are pending (the bot
is not done yet). It is cancelled when the bot starts speaking again, when a user turn
starts, or when function calls start. It fires ``UserIdle`` once, ``user_idle_timeout``
seconds after it started; only the next ``BotStoppedSpeaking`` starts it again. A timeout
of 0 turns idle detection off.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.events import (
    BotStartedSpeaking,
    BotStoppedSpeaking,
    Event,
    FunctionCallCancelled,
    FunctionCallResult,
    FunctionCallsStarted,
    UserIdle,
    UserTurnDiscarded,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.turns.clock import Clock, event_time


class UserIdleController:
    """Emits ``UserIdle`` once when the user stays silent after the bot finished."""

    def __init__(self, user_idle_timeout: float = 0.0, *, emit: Callable[[Event], None]) -> None:
        self.user_idle_timeout = user_idle_timeout
        self._emit = emit
        self._clock = Clock()
        self._deadline: float | None = None
        self._user_turn = False
        self._calls: set[str] = set()  # function calls without a final result yet

    @property
    def enabled(self) -> bool:
        return self.user_idle_timeout > 0

    def next_deadline(self) -> float | None:
        return self._deadline

    def handle(self, event: Event) -> None:
        """Feed one event; it needs the bot, function-call and user-turn events."""
        t = event_time(event)
        if t is not None:
            self.advance(t)
        if isinstance(event, BotStoppedSpeaking):
            if not self._user_turn and not self._calls:
                self._start_timer()
        elif isinstance(event, BotStartedSpeaking):
            self._deadline = None
        elif isinstance(event, UserTurnStarted):
            self._user_turn = True
            self._deadline = None
        elif isinstance(event, UserTurnStopped | UserTurnDiscarded):
            self._user_turn = False
        elif isinstance(event, FunctionCallsStarted):
            self._calls.update(call.tool_call_id for call in event.calls)
            self._deadline = None
        elif isinstance(event, FunctionCallResult) and event.is_final:
            self._calls.discard(event.tool_call_id)
        elif isinstance(event, FunctionCallCancelled):
            self._calls.discard(event.tool_call_id)

    def advance(self, t: float) -> None:
        """Move time to ``t``; fire ``UserIdle`` at its deadline if that has come."""
        if self._deadline is not None and self._deadline <= t:
            fired_at, self._deadline = self._deadline, None
            self._clock.see(fired_at)
            self._emit(UserIdle(t=fired_at))
        self._clock.see(t)

    def _start_timer(self) -> None:
        if self.enabled:
            self._deadline = self._clock.now + self.user_idle_timeout
