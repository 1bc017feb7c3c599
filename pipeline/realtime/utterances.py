"""The caller's utterances on their way to becoming user audio items, and the ones to take
back: speech that made no turn is often judged (a backchannel, at the end of the
utterance) before the provider has confirmed the commit that made its item."""

from __future__ import annotations

from collections import deque

MATCH = 0.6  # seconds between a discarded speech's onset and its utterance's


class Utterances:
    """Commits in flight (by onset), committed items not yet a turn, discards pending."""

    def __init__(self) -> None:
        self._in_flight: deque[float] = deque()  # onsets of commits not yet confirmed
        self._items: list[tuple[float, str]] = []  # (onset, item id) not yet a turn
        self._doomed: list[float | None] = []  # discarded before their commit came back

    @property
    def in_flight(self) -> bool:
        return bool(self._in_flight)

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def sent(self, onset: float) -> None:
        self._in_flight.append(onset)

    def committed(self, item_id: str) -> bool:
        """The provider made ``item_id`` of the oldest commit in flight; False if that
        utterance was discarded meanwhile (the item is to be deleted)."""
        onset = self._in_flight.popleft() if self._in_flight else 0.0
        for doomed in self._doomed:
            if doomed is None or abs(doomed - onset) <= MATCH:
                self._doomed.remove(doomed)
                return False
        self._items.append((onset, item_id))
        return True

    def refused(self) -> None:
        """The provider refused the oldest commit in flight (it made no item)."""
        if self._in_flight:
            self._in_flight.popleft()

    def discard(self, onset: float | None) -> str | None:
        """The item of the utterance that began at ``onset`` (None: the latest), if it is
        known yet; else the discard waits for its commit."""
        if self._items:
            if onset is None:
                return self._items.pop()[1]
            index = min(range(len(self._items)), key=lambda i: abs(self._items[i][0] - onset))
            if abs(self._items[index][0] - onset) <= MATCH:
                return self._items.pop(index)[1]
        if self._in_flight:
            self._doomed.append(onset)
        return None

    def keep(self, item_ids: list[str]) -> None:
        """Only these items are still waiting to be a turn (the others were bound)."""
        self._items = [u for u in self._items if u[1] in item_ids]
