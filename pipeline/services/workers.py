"""A bounded pool of threads for blocking model calls, awaited from the event loop.

Inference (whisper, llama.cpp, onnxruntime) blocks for tens of milliseconds to seconds,
so it never runs on the event loop. Each embedded model gets its own
:class:`WorkerPool`: ``max_workers`` calls run at once, at most ``max_queue`` more wait,
and anything past that fails fast with :class:`PoolSaturated` rather than piling up
latency no user would wait for.

Cancellation: when the coroutine awaiting :meth:`WorkerPool.run` is cancelled, a call
still waiting in the queue is dropped and never runs. A call already running cannot be
stopped (Python cannot kill a thread): its slot stays busy until the function returns.
Long calls should therefore check a stop flag; :meth:`WorkerPool.stream` hands one to
its producer and sets it when the consumer stops early.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from loguru import logger

T = TypeVar("T")

# Marks the end of a stream in its queue (a producer may emit any object, even None).
_END = object()


def _retrieve(job: asyncio.Future[Any]) -> None:
    """Mark a job's exception as seen; the consumer that wanted its result has gone."""
    if not job.cancelled() and job.exception() is not None:
        logger.debug("a pool job failed after its consumer stopped: {}", job.exception())


class PoolSaturated(RuntimeError):
    """Every worker of a pool is busy and its queue is full: retry in a moment."""

    retryable = True

    def __init__(self, pool: str, busy: int, queued: int) -> None:
        super().__init__(
            f"The {pool} model is busy ({busy} running, {queued} waiting, queue full); "
            "try again in a moment."
        )
        self.pool = pool


@dataclass(frozen=True, slots=True)
class PoolStats:
    """Counts for /health. ``completed`` includes calls that raised (also in ``failed``);
    ``dropped`` are queued calls whose caller went away before they started."""

    max_workers: int
    max_queue: int
    busy: int
    queued: int
    completed: int
    failed: int
    rejected: int
    dropped: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class WorkerPool:
    """``max_workers`` threads for one model, with a waiting room of ``max_queue`` calls.

    Safe to share between sessions and event loops: the counters are guarded by a
    thread lock and nothing binds the pool to one loop.
    """

    def __init__(self, name: str, max_workers: int = 1, max_queue: int = 8) -> None:
        if max_workers < 1 or max_queue < 0:
            raise ValueError("max_workers must be >= 1 and max_queue >= 0")
        self.name = name
        self.max_workers = max_workers
        self.max_queue = max_queue
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix=f"pool-{name}")
        self._lock = threading.Lock()
        self._busy = 0
        self._queued = 0
        self._completed = 0
        self._failed = 0
        self._rejected = 0
        self._dropped = 0

    def stats(self) -> PoolStats:
        with self._lock:
            return PoolStats(
                self.max_workers,
                self.max_queue,
                self._busy,
                self._queued,
                self._completed,
                self._failed,
                self._rejected,
                self._dropped,
            )

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread; raises :class:`PoolSaturated` at once if
        the pool and its queue are full."""
        future = self._submit(fn, args)
        # wrap_future cancels the concurrent future when this await is cancelled: a
        # queued call is then dropped (see _settle), a running one finishes on its own.
        return await asyncio.wrap_future(future)

    async def stream(
        self, produce: Callable[[Callable[[Any], None], threading.Event], None]
    ) -> AsyncGenerator[Any, None]:
        """Run ``produce(emit, stop)`` in a worker and yield what it emits, in order.

        The producer calls ``emit(item)`` from its thread and should return soon after
        ``stop`` is set: that happens when the consumer closes the iterator early
        (``aclose``, ``break``, cancellation). An exception in the producer is raised
        here after the items emitted before it.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()

        def emit(item: Any) -> None:
            if stop.is_set():
                return
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                stop.set()

        # Items are scheduled with call_soon_threadsafe before the job returns, so the
        # end marker (scheduled when the job's result reaches the loop) follows them.
        job = asyncio.ensure_future(self.run(produce, emit, stop))
        job.add_done_callback(lambda _: queue.put_nowait(_END))
        try:
            while (item := await queue.get()) is not _END:
                yield item
            await job
        finally:
            stop.set()
            if not job.done():
                job.cancel()
            # The consumer may stop before the job ends: its outcome is then nobody's, but
            # is still retrieved (asyncio logs an exception nobody retrieved as an error).
            # Not awaited: a running producer cannot be stopped, and the close must not wait.
            job.add_done_callback(_retrieve)

    def shutdown(self, wait: bool = False) -> None:
        """Stop taking calls; queued ones are dropped, running ones finish."""
        self._executor.shutdown(wait=wait, cancel_futures=True)

    def _submit(self, fn: Callable[..., T], args: tuple[Any, ...]) -> Future[T]:
        with self._lock:
            # Submitted calls wait in the executor until a thread takes them, so the
            # admitted total (running + waiting) is what the bound applies to.
            if self._busy + self._queued >= self.max_workers + self.max_queue:
                self._rejected += 1
                raise PoolSaturated(self.name, self._busy, self._queued)
            self._queued += 1
        try:
            future = self._executor.submit(self._call, fn, args)
        except RuntimeError:  # shut down
            with self._lock:
                self._queued -= 1
            raise
        future.add_done_callback(self._settle)
        return future

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._lock:
            self._queued -= 1
            self._busy += 1
        ok = False
        try:
            result = fn(*args)
            ok = True
            return result
        finally:
            with self._lock:
                self._busy -= 1
                self._completed += 1
                self._failed += not ok

    def _settle(self, future: Future[Any]) -> None:
        # A cancelled future never reached _call, so it still counts as queued.
        if future.cancelled():
            with self._lock:
                self._queued -= 1
                self._dropped += 1
