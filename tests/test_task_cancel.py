"""Ending background tasks: cancelled, waited for, outcomes retrieved."""

from __future__ import annotations

import asyncio
import gc

import pytest

from pipeline.task_cancel import cancel_and_wait


async def test_running_tasks_are_cancelled_and_have_finished_on_return() -> None:
    cleaned: list[str] = []

    async def worker(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0)  # cleanup that itself awaits
            cleaned.append(name)

    tasks = [asyncio.create_task(worker(n)) for n in "ab"]
    await asyncio.sleep(0)
    await cancel_and_wait(tasks)
    assert all(t.done() and t.cancelled() for t in tasks)
    assert sorted(cleaned) == ["a", "b"], "each task's finally ran before the return"


async def test_none_and_finished_tasks_are_left_as_they_are() -> None:
    async def value() -> int:
        return 7

    done = asyncio.create_task(value())
    await done
    await cancel_and_wait([None, done, None])
    assert done.result() == 7
    await cancel_and_wait([])


async def test_a_failed_task_does_not_raise_and_is_not_reported_unretrieved() -> None:
    unretrieved: list[object] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))

    async def fails() -> None:
        raise RuntimeError("boom")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)  # it has failed by now
    await cancel_and_wait([task])
    del task
    gc.collect()
    loop.set_exception_handler(None)
    assert unretrieved == []


async def test_a_set_may_change_while_waiting() -> None:
    tasks: set[asyncio.Task[None]] = set()
    for _ in range(3):
        task = asyncio.create_task(asyncio.sleep(3600))
        tasks.add(task)
        task.add_done_callback(tasks.discard)  # as the session parts keep theirs
    await cancel_and_wait(tasks)
    assert not tasks


async def test_cancelling_the_caller_propagates_once_the_tasks_are_done() -> None:
    async def slow_cleanup() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(3600)  # a cleanup that would hang: only a second cancel ends it

    task = asyncio.create_task(slow_cleanup())
    await asyncio.sleep(0)
    closer = asyncio.create_task(cancel_and_wait([task]))
    while not task.cancelling():
        await asyncio.sleep(0)
    await asyncio.sleep(0)  # the task is in its cleanup now
    closer.cancel()
    async with asyncio.timeout(10):
        with pytest.raises(asyncio.CancelledError):
            await closer
    assert task.done()
