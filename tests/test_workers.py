"""WorkerPool.stream: a producer that fails after its consumer stopped reading leaves no
unretrieved exception behind (asyncio would log "Task exception was never retrieved")."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import aclosing
from typing import Any

import pytest

from pipeline.services.workers import WorkerPool


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    pool = WorkerPool("test", max_workers=1, max_queue=0)
    yield pool
    pool.shutdown(wait=True)


async def collect_garbage() -> None:
    """Drop every unreachable task: its __del__ reports an exception never retrieved."""
    for _ in range(3):
        gc.collect()
        await asyncio.sleep(0)


def handler_into(errors: list[dict[str, Any]]) -> None:
    asyncio.get_running_loop().set_exception_handler(lambda _, context: errors.append(context))


async def read_one_then_close(pool: WorkerPool, produce: Callable[..., None]) -> Any:
    async with aclosing(pool.stream(produce)) as items:
        async for item in items:
            return item


async def test_a_failure_after_the_consumer_stopped_is_retrieved(pool: WorkerPool) -> None:
    errors: list[dict[str, Any]] = []
    handler_into(errors)
    failed = threading.Event()

    def produce(emit: Callable[[Any], None], stop: threading.Event) -> None:
        emit("first")
        failed.set()
        raise RuntimeError("the model broke")

    async with aclosing(pool.stream(produce)) as items:
        assert await anext(items) == "first"
        # The job fails and its task finishes while nobody reads any more.
        while pool.stats().failed == 0:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
    await collect_garbage()
    assert failed.is_set()
    assert not errors, [e.get("message") for e in errors]


async def test_a_failure_after_a_close_mid_job_is_retrieved(pool: WorkerPool) -> None:
    errors: list[dict[str, Any]] = []
    handler_into(errors)
    release = threading.Event()

    def produce(emit: Callable[[Any], None], stop: threading.Event) -> None:
        emit("first")
        release.wait(2)
        raise RuntimeError("failed on the way out")

    assert await read_one_then_close(pool, produce) == "first"
    release.set()
    while pool.stats().busy:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    await collect_garbage()
    assert not errors, [e.get("message") for e in errors]


async def test_a_failure_read_to_the_end_is_raised(pool: WorkerPool) -> None:
    def produce(emit: Callable[[Any], None], stop: threading.Event) -> None:
        emit(1)
        raise RuntimeError("after one item")

    seen: list[int] = []
    with pytest.raises(RuntimeError, match="after one item"):
        async for item in pool.stream(produce):
            seen.append(item)
    assert seen == [1]
