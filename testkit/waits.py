"""Waiting on a condition instead of sleeping for a time that a loaded machine may outlast."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(
    condition: Callable[[], object],
    within: float = 5.0,
    what: str = "condition",
    every: float = 0.01,
) -> float:
    """Poll ``condition`` every ``every`` seconds until it is true; fail the test (an
    ``AssertionError`` naming ``what``) if it is still false after ``within`` seconds.
    Returns the seconds it took. ``within`` is a bound on a hang, not a speed test: make
    it generous."""
    started = time.monotonic()
    deadline = started + within
    while not condition():
        assert time.monotonic() < deadline, f"{what} not met within {within} s"
        await asyncio.sleep(every)
    return time.monotonic() - started
