"""With the provider's VAD taking turns (``server_vad`` / ``semantic_vad``), the provider
starts each response itself. Parley still decides when a turn of its own ends (its
transcript, its context), so a response the provider started waits here, its events
kept, until Parley's next answer claims it; one nobody claimed in time is stale (the
provider answered speech Parley judged no turn: a backchannel, a cough) and goes."""

from __future__ import annotations

import time
from collections.abc import Callable

from pipeline.realtime.wire import ServerEvent

UNCLAIMED_SECONDS = 6.0  # a response the provider started that no turn claimed by then
# Bounds on what waits (a caller who keeps making sounds the provider answers and Parley
# takes for no turn): responses at once, the oldest pushed out first; events each (a
# provider sends audio faster than it plays: 2,000 deltas is a minute or more of speech).
MAX_WAITING = 4
MAX_EVENTS = 2000


class ServerResponses:
    """The provider's own responses, not yet claimed, oldest first. Those pushed out
    (stale, past ``MAX_WAITING``, or past ``MAX_EVENTS``) wait in :meth:`stale` to be
    cancelled and deleted."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._waiting: dict[str, tuple[float, list[ServerEvent]]] = {}
        self._gone: list[tuple[str, list[ServerEvent]]] = []

    @property
    def pushed_out(self) -> bool:
        """Whether responses wait in :meth:`stale` already."""
        return bool(self._gone)

    def started(self, response_id: str) -> None:
        self._waiting[response_id] = (self._clock(), [])
        while len(self._waiting) > MAX_WAITING:
            self._push_out(next(iter(self._waiting)))

    def feed(self, response_id: str, event: ServerEvent) -> bool:
        """Keep ``event`` if it belongs to a waiting response."""
        waiting = self._waiting.get(response_id)
        if waiting is None:
            return False
        waiting[1].append(event)
        if len(waiting[1]) > MAX_EVENTS:
            self._push_out(response_id)
        return True

    def stale(self) -> list[tuple[str, list[ServerEvent]]]:
        """The responses nobody claimed in time, or pushed out, taken out (to cancel and
        delete)."""
        cutoff = self._clock() - UNCLAIMED_SECONDS
        for rid in [rid for rid, (at, _) in self._waiting.items() if at < cutoff]:
            self._push_out(rid)
        gone, self._gone = self._gone, []
        return gone

    def _push_out(self, response_id: str) -> None:
        self._gone.append((response_id, self._waiting.pop(response_id)[1]))

    def claim(self) -> tuple[str, list[ServerEvent]] | None:
        """The oldest waiting response and its events so far, taken out."""
        if not self._waiting:
            return None
        response_id = next(iter(self._waiting))
        return response_id, self._waiting.pop(response_id)[1]

    def clear(self) -> None:
        self._waiting.clear()
        self._gone.clear()
