"""What a user-turn start or stop strategy is, and the live facts it may read.

Strategies are small synchronous deciders. The turn controller feeds them events and owns
the turn state; a strategy only answers "does this start (or stop) the user's turn?".
Stop strategies may also ask for one timer through ``deadline``; the controller calls
:meth:`UserTurnStopStrategy.on_timer` once that time is reached.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from pipeline.events import Event


@dataclass(slots=True)
class TurnContext:
    """Facts the controller keeps up to date before any strategy sees an event."""

    now: float = 0.0
    user_speaking: bool = False  # the VAD's view: between SpeechStarted and SpeechStopped
    user_starting: bool = False  # between SpeechOnset and SpeechStarted (or a false start)
    bot_speaking: bool = False  # between BotStartedSpeaking and BotStoppedSpeaking
    turn_active: bool = False


class UserTurnStartStrategy(ABC):
    """Decides when the user's turn begins.

    ``enable_interruptions`` is copied into ``UserTurnStarted.interrupt`` when this
    strategy starts a turn.
    """

    name: str = "start"

    def __init__(self, *, enable_interruptions: bool = True) -> None:
        self.enable_interruptions = enable_interruptions

    @abstractmethod
    def handle(self, event: Event, ctx: TurnContext) -> bool:
        """Called for each event while no turn is active; True starts a turn."""

    def reset(self) -> None:  # noqa: B027 - optional hook, most strategies keep no state
        """A turn just started (by any strategy): forget what led to it."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(enable_interruptions={self.enable_interruptions})"


class UserTurnStopStrategy(ABC):
    """Decides when the user's turn is over."""

    name: str = "stop"

    @property
    def deadline(self) -> float | None:
        """When :meth:`on_timer` should be called; ``None`` when no timer runs."""
        return None

    @abstractmethod
    def handle(self, event: Event, ctx: TurnContext) -> bool:
        """Called for each event while a turn is active; True stops the turn."""

    def on_timer(self, ctx: TurnContext) -> bool:
        """Called once ``ctx.now`` reached :attr:`deadline`; True stops the turn."""
        return False

    def pop_prediction(self) -> bool:
        """True once after the strategy foresaw the turn's end (asked after each
        :meth:`handle` and :meth:`on_timer` that did not stop the turn)."""
        return False

    def reset(self) -> None:  # noqa: B027 - optional hook
        """A turn started or stopped: drop per-turn state and timers."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
