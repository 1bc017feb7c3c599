"""The user-turn state machine: when the user has the floor, and when they are done.

Emits, through ``emit``:

- ``UserTurnStarted(t, strategy, interrupt)``: a start strategy fired while no turn was
  active (Pipecat's ``on_user_turn_started``). ``interrupt`` is the strategy's
  ``enable_interruptions``, whether or not the bot is speaking at that moment: an LLM
  answer may be in flight before any of it is heard.
- ``UserTurnStopped(t, strategy)``: a stop strategy fired (``on_user_turn_stopped``).
- ``UserTurnStopTimeout(t)`` then ``UserTurnStopped(t, "timeout")``: the watchdog ended a
  turn no stop strategy ended (``on_user_turn_stop_timeout``).
- ``UserTurnDiscarded(t, text)``: the session judged the turn no turn at all
  (:meth:`UserTurnController.discard`: a backchannel over the bot).
- ``UserTurnEndPredicted(t, strategy)``: a stop strategy foresees the end of the turn
  (:meth:`UserTurnStopStrategy.pop_prediction`); the turn goes on until it stops.

The watchdog follows Pipecat: it restarts on every SpeechStarted, SpeechStopped,
Transcription (interim too), turn start and turn stop, and fires
``user_turn_stop_timeout`` seconds after the last of them if a turn is active and the VAD
says the user is silent. A turn never stops while the user is speaking.

A possible onset (``SpeechOnset``, until ``SpeechStarted`` or ``SpeechFalseStart``)
holds any stop too: a turn must not end in the 200 ms in which the VAD is confirming that
the user speaks again. A stop strategy is asked again at the false start.

``AudioIdle`` (audio stopped mid-speech) counts as the VAD's ``SpeechStopped``, as
Pipecat's VAD controller forces a stop on audio idle: without it the turn would wait for
a stop that never comes; with it the usual stop rules, or the watchdog, end the turn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pipeline.events import (
    AudioIdle,
    BotStartedSpeaking,
    BotStoppedSpeaking,
    Event,
    SpeechFalseStart,
    SpeechOnset,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    UserTurnDiscarded,
    UserTurnEndPredicted,
    UserTurnStarted,
    UserTurnStopped,
    UserTurnStopTimeout,
)
from pipeline.turns.clock import earliest, event_time
from pipeline.turns.strategy import TurnContext, UserTurnStartStrategy, UserTurnStopStrategy

DEFAULT_USER_TURN_STOP_TIMEOUT = 5.0
TIMEOUT_STRATEGY = "timeout"  # the ``strategy`` of a turn the watchdog stopped

# Events that show the conversation is moving; each restarts the watchdog.
_ACTIVITY = (SpeechStarted, SpeechStopped, SpeechFalseStart, Transcription)


class UserTurnController:
    """Tracks the user turn; asks start strategies while idle, stop strategies during a turn.

    Drive it with :meth:`handle` for each event and :meth:`advance` as time passes;
    :meth:`next_deadline` says when :meth:`advance` next has something to do.
    """

    def __init__(
        self,
        start_strategies: Sequence[UserTurnStartStrategy],
        stop_strategies: Sequence[UserTurnStopStrategy],
        *,
        user_turn_stop_timeout: float = DEFAULT_USER_TURN_STOP_TIMEOUT,
        emit: Callable[[Event], None],
    ) -> None:
        if not start_strategies or not stop_strategies:
            raise ValueError("need at least one start and one stop strategy")
        if user_turn_stop_timeout <= 0:
            raise ValueError("user_turn_stop_timeout must be positive")
        self.start_strategies = tuple(start_strategies)
        self.stop_strategies = tuple(stop_strategies)
        self.user_turn_stop_timeout = user_turn_stop_timeout
        self._emit = emit
        self._ctx = TurnContext()
        self._watchdog: float | None = None

    @property
    def turn_active(self) -> bool:
        return self._ctx.turn_active

    @property
    def user_speaking(self) -> bool:
        return self._ctx.user_speaking

    @property
    def bot_speaking(self) -> bool:
        return self._ctx.bot_speaking

    @property
    def now(self) -> float:
        return self._ctx.now

    def next_deadline(self) -> float | None:
        """The earliest time at which :meth:`advance` will fire something, if any."""
        if not self._ctx.turn_active:
            return self._watchdog
        return earliest(self._watchdog, *(s.deadline for s in self.stop_strategies))

    def handle(self, event: Event) -> None:
        """Feed one event (timers due before its ``t`` fire first)."""
        t = event_time(event)
        if t is not None:
            self.advance(t)
        if isinstance(event, AudioIdle):
            if not self._ctx.user_speaking:
                return
            event = SpeechStopped(t=event.t)
        self._track(event)
        if not self._ctx.turn_active:
            self._ask_start_strategies(event)
        if self._ctx.turn_active:
            self._ask_stop_strategies(event)
        if isinstance(event, _ACTIVITY):
            self._restart_watchdog()

    def advance(self, t: float) -> None:
        """Let time pass up to ``t``, firing due timers in time order at their deadlines."""
        while (due := self.next_deadline()) is not None and due <= t:
            self._ctx.now = max(self._ctx.now, due)
            strategy = self._due_strategy(due)
            if strategy is not None:
                fired = strategy.on_timer(self._ctx)
                if strategy.deadline is not None and strategy.deadline <= due:
                    raise RuntimeError(f"{strategy!r} kept a timer that is already due")
                if not (fired and self._stop_turn(strategy.name)):
                    self._predicted(strategy)
            else:
                self._watchdog = None
                if self._ctx.turn_active and not self._ctx.user_speaking:
                    self._emit(UserTurnStopTimeout(t=self._ctx.now))
                    self._stop_turn(TIMEOUT_STRATEGY)
        self._ctx.now = max(self._ctx.now, t)

    def _track(self, event: Event) -> None:
        if isinstance(event, SpeechOnset):
            self._ctx.user_starting = True
        elif isinstance(event, SpeechStarted):
            self._ctx.user_speaking, self._ctx.user_starting = True, False
        elif isinstance(event, SpeechFalseStart):
            self._ctx.user_starting = False
        elif isinstance(event, SpeechStopped):
            self._ctx.user_speaking = False
        elif isinstance(event, BotStartedSpeaking):
            self._ctx.bot_speaking = True
        elif isinstance(event, BotStoppedSpeaking):
            self._ctx.bot_speaking = False

    def _ask_start_strategies(self, event: Event) -> None:
        for strategy in self.start_strategies:
            if strategy.handle(event, self._ctx):
                self._start_turn(strategy)
                return

    def _ask_stop_strategies(self, event: Event) -> None:
        for strategy in self.stop_strategies:
            # Stop at the first that fires: the rest would only carry this event into the
            # next turn after their reset.
            if strategy.handle(event, self._ctx) and self._stop_turn(strategy.name):
                return
            self._predicted(strategy)

    def _predicted(self, strategy: UserTurnStopStrategy) -> None:
        if strategy.pop_prediction() and self._ctx.turn_active:
            self._emit(UserTurnEndPredicted(t=self._ctx.now, strategy=strategy.name))

    def _due_strategy(self, due: float) -> UserTurnStopStrategy | None:
        # On a tie a strategy wins over the watchdog: it is the turn's real end.
        if self._ctx.turn_active:
            for strategy in self.stop_strategies:
                if strategy.deadline is not None and strategy.deadline <= due:
                    return strategy
        return None

    def _start_turn(self, strategy: UserTurnStartStrategy) -> None:
        self._ctx.turn_active = True
        self._reset_strategies()
        self._restart_watchdog()
        self._emit(
            UserTurnStarted(
                t=self._ctx.now, strategy=strategy.name, interrupt=strategy.enable_interruptions
            )
        )

    def _reset_strategies(self) -> None:
        for start in self.start_strategies:
            start.reset()
        for stop in self.stop_strategies:
            stop.reset()

    def discard(self, t: float, text: str = "") -> None:
        """End the turn in progress as no turn at all (a backchannel): the strategies
        forget it and ``UserTurnDiscarded`` goes out instead of ``UserTurnStopped``."""
        self.advance(t)
        if not self._ctx.turn_active:
            return
        self._ctx.turn_active = False
        self._reset_strategies()
        self._watchdog = None
        self._emit(UserTurnDiscarded(t=self._ctx.now, text=text))

    def _stop_turn(self, strategy_name: str) -> bool:
        # A late signal must not end the turn over the user's voice (Pipecat's rule too),
        # nor while the VAD is hearing what may be its return.
        if not self._ctx.turn_active or self._ctx.user_speaking or self._ctx.user_starting:
            return False
        self._ctx.turn_active = False
        for s in self.stop_strategies:
            s.reset()
        self._watchdog = None
        self._emit(UserTurnStopped(t=self._ctx.now, strategy=strategy_name))
        return True

    def _restart_watchdog(self) -> None:
        armed = self._ctx.turn_active and not self._ctx.user_speaking
        self._watchdog = self._ctx.now + self.user_turn_stop_timeout if armed else None
