"""Things that may be used once: a stream token, a webhook. :class:`UsedOnce` remembers
what was used until it could no longer be used anyway (its expiry), in bounded memory.

One process remembers its own: behind a balancer, a token must come back to the replica
that issued it for the refusal of a second use to hold (a phone call's webhook and its
stream reach the same replica when routed by call; see docs/scaling.md).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class UsedOnce:
    """Keys used, each until its expiry (wall clock: tokens carry wall-clock expiries).

    Keys are forgotten oldest first, once expired: a key behind one that lives longer is
    kept a little past its expiry, never dropped before it. Past ``max_keys`` remembered
    the oldest is forgotten (counted in ``forgotten``): a flood may then reuse an old
    key, but memory stays bounded."""

    def __init__(self, max_keys: int = 100_000, clock: Callable[[], float] = time.time) -> None:
        self.max_keys = max_keys
        self.forgotten = 0
        self._clock = clock
        self._expiry: OrderedDict[str, float] = OrderedDict()  # in order of use

    def use(self, key: str, expires: float) -> bool:
        """Mark ``key`` used until ``expires``; False when it was already (a second use)."""
        now = self._clock()
        self._prune(now)
        if key in self._expiry:
            return False
        if len(self._expiry) >= self.max_keys:
            self._expiry.popitem(last=False)
            self.forgotten += 1
        self._expiry[key] = expires
        return True

    def __len__(self) -> int:
        return len(self._expiry)

    def _prune(self, now: float) -> None:
        while self._expiry:
            key, expires = next(iter(self._expiry.items()))
            if expires > now:
                return
            del self._expiry[key]
