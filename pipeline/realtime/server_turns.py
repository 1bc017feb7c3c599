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


class ServerResponses:
    """The provider's own responses, not yet claimed, oldest first."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._waiting: dict[str, tuple[float, list[ServerEvent]]] = {}

    def started(self, response_id: str) -> None:
        self._waiting[response_id] = (self._clock(), [])

    def feed(self, response_id: str, event: ServerEvent) -> bool:
        """Keep ``event`` if it belongs to a waiting response."""
        waiting = self._waiting.get(response_id)
        if waiting is None:
            return False
        waiting[1].append(event)
        return True

    def stale(self) -> list[tuple[str, list[ServerEvent]]]:
        """The responses nobody claimed in time, taken out (to cancel and delete)."""
        cutoff = self._clock() - UNCLAIMED_SECONDS
        old = [rid for rid, (at, _) in self._waiting.items() if at < cutoff]
        return [(rid, self._waiting.pop(rid)[1]) for rid in old]

    def claim(self) -> tuple[str, list[ServerEvent]] | None:
        """The oldest waiting response and its events so far, taken out."""
        if not self._waiting:
            return None
        response_id = next(iter(self._waiting))
        return response_id, self._waiting.pop(response_id)[1]

    def clear(self) -> None:
        self._waiting.clear()
