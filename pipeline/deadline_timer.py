"""Turn-taking's next timer, fired at its time rather than at the next audio frame.

Audio drives turn-taking: the session lets time pass on every 20 ms frame it hears
(:meth:`~pipeline.conversation.Conversation.tick`). A timer due between two frames, such
as the end of a turn that waited for more words, so fired at the next frame: 10 ms late
on average and up to 20, on the path of the answer. :class:`DeadlineTimer` keeps one
event-loop timer at the earliest deadline, re-armed as the deadlines move.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class DeadlineTimer:
    """Calls ``fire`` when ``clock`` reaches the deadline last :meth:`arm`-ed."""

    def __init__(self, fire: Callable[[], None], clock: Callable[[], float]) -> None:
        self._fire = fire
        self._clock = clock
        self._due: float | None = None
        self._handle: asyncio.TimerHandle | None = None

    def arm(self, due: float | None) -> None:
        """Fire at ``due`` (a ``clock`` time) instead of the deadline before; None: never."""
        if due == self._due:
            return
        self.cancel()
        self._due = due
        if due is not None:
            delay = max(0.0, due - self._clock())
            self._handle = asyncio.get_running_loop().call_later(delay, self._fired)

    def passed(self, now: float) -> bool:
        """No deadline is armed after ``now`` (none, or it has come): arm the next one."""
        return self._due is None or self._due <= now

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._due = None

    def _fired(self) -> None:
        self._handle = self._due = None
        self._fire()
