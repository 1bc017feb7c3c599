"""Muting the user: while muted, what the user says is dropped before anyone acts on it.

:class:`UserMute` ORs its strategies, like Pipecat's ``_maybe_mute_frame``: on every event
it first decides from the state *before* the event whether to drop it (only user-side
events are ever dropped), then lets every strategy see the event, then emits
``UserMuteStarted``/``UserMuteStopped`` if the combined state changed. So the
``BotStartedSpeaking`` that mutes is itself delivered, and the ``SpeechStarted`` after it
is not.

A strategy may be muted from the very start (nothing has happened yet). Pipecat finds out
on the first audio frame; here the first :meth:`UserMute.advance` or :meth:`UserMute.handle`
does, emitting ``UserMuteStarted`` at that time, before deciding on that event.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from pipeline.events import (
    AudioIdle,
    Event,
    Interruption,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    UserMuteStarted,
    UserMuteStopped,
)
from pipeline.turns.clock import Clock, event_time

# What the user side produces; the only events mute ever drops. AudioIdle is a forced
# VAD stop, so it goes with SpeechStopped.
USER_EVENTS: tuple[type[Event], ...] = (
    SpeechStarted,
    SpeechStopped,
    AudioIdle,
    Transcription,
    Interruption,
)


class UserMuteStrategy(ABC):
    """One reason to mute the user; sees every event, says whether it wants mute now."""

    @property
    @abstractmethod
    def muted(self) -> bool:
        """Whether this strategy wants the user muted, given the events seen so far."""

    @abstractmethod
    def handle(self, event: Event) -> None:
        """Update from one event."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class UserMute:
    """Combines mute strategies (any muted → muted) and says which events to drop."""

    def __init__(
        self, strategies: Sequence[UserMuteStrategy], *, emit: Callable[[Event], None]
    ) -> None:
        self.strategies = tuple(strategies)
        self._emit = emit
        self._clock = Clock()
        self._muted: bool | None = None  # None until the first look at the strategies

    @property
    def muted(self) -> bool:
        return bool(self._muted)

    def advance(self, t: float) -> None:
        """Move time to ``t``; the first call settles the initial state."""
        self._clock.see(t)
        if self._muted is None:
            self._update()

    def handle(self, event: Event) -> bool:
        """Feed one event; True means it must be dropped (the user is muted)."""
        self.advance(self._clock.see(event_time(event)))
        drop = bool(self._muted) and isinstance(event, USER_EVENTS)
        for strategy in self.strategies:
            strategy.handle(event)
        self._update()
        return drop

    def _update(self) -> None:
        was_muted = bool(self._muted)
        self._muted = any(s.muted for s in self.strategies)
        if self._muted and not was_muted:
            self._emit(UserMuteStarted(t=self._clock.now))
        elif was_muted and not self._muted:
            self._emit(UserMuteStopped(t=self._clock.now))
