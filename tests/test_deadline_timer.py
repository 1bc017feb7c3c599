"""pipeline.deadline_timer: turn-taking's next deadline fired on the loop at its time."""

from __future__ import annotations

import asyncio
import time

from pipeline.deadline_timer import DeadlineTimer


async def test_fires_once_at_the_deadline_armed_last() -> None:
    fired: list[float] = []
    timer = DeadlineTimer(lambda: fired.append(time.monotonic()), time.monotonic)
    start = time.monotonic()
    timer.arm(start + 0.2)
    timer.arm(start + 0.05)  # the deadline moved sooner: only this one fires
    assert not timer.passed(start)
    await asyncio.sleep(0.3)
    assert len(fired) == 1
    assert 0.05 <= fired[0] - start < 0.2
    assert timer.passed(time.monotonic())


async def test_the_same_deadline_is_not_rearmed_and_none_cancels() -> None:
    fired: list[float] = []
    timer = DeadlineTimer(lambda: fired.append(time.monotonic()), time.monotonic)
    due = time.monotonic() + 0.05
    timer.arm(due)
    timer.arm(due)
    await asyncio.sleep(0.1)
    assert len(fired) == 1
    timer.arm(time.monotonic() + 0.05)
    timer.arm(None)
    await asyncio.sleep(0.1)
    assert len(fired) == 1


async def test_a_deadline_already_past_fires_on_the_next_loop_turn() -> None:
    fired: list[float] = []
    timer = DeadlineTimer(lambda: fired.append(0.0), time.monotonic)
    timer.arm(time.monotonic() - 1.0)
    assert fired == []  # never from inside arm(): the caller may be mid-update
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert fired == [0.0]
