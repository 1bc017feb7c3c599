"""Event-loop lag: how late a timer wakes up, the delay every callback of the loop shares.

A task sleeps a fixed interval and measures how much longer the sleep took; anything
that blocks the loop (a model call on the loop, heavy JSON, a sync file write) shows up
as lag, and with it late audio frames for every session.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

# How often the loop is probed, and how far back the "recent max" looks.
INTERVAL_SECONDS = 0.25
WINDOW_SECONDS = 10.0


class LoopLagMonitor:
    """Samples the loop's lag every ``interval``; keeps the max of the last ``window``."""

    def __init__(
        self,
        on_sample: Callable[[float], None] | None = None,
        interval: float = INTERVAL_SECONDS,
        window: float = WINDOW_SECONDS,
    ) -> None:
        self.interval = interval
        self.on_sample = on_sample
        self.samples = 0
        self.last = 0.0
        self._recent: deque[float] = deque(maxlen=max(1, int(window / interval)))

    @property
    def recent_max(self) -> float:
        """The largest lag among the samples of the last window (0 before any sample)."""
        return max(self._recent, default=0.0)

    def record(self, lag: float) -> None:
        self.samples += 1
        self.last = lag
        self._recent.append(lag)
        if self.on_sample is not None:
            self.on_sample(lag)

    async def run(self) -> None:
        """Probe forever (cancel to stop)."""
        while True:
            started = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.record(max(0.0, time.perf_counter() - started - self.interval))
