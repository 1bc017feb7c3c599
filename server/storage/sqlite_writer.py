"""The SQLite transcript store's writer: one thread, a bounded queue, group commits.

Every job runs on the one thread that owns the connection, in the order it was queued,
so the event loop never touches the disk and a read sees every write queued before it.

Writes are grouped: the writer opens a transaction, runs the write it took and then every
write already waiting behind it, and commits as soon as the queue is empty (or after
``max_batch`` writes, or ``max_batch_seconds`` under a flood). A lone turn is therefore
committed (``synchronous=FULL``: durable) right after it was taken, as before, while a
burst costs one fsync per group instead of one per write. If any write of a group fails,
the group is rolled back and replayed one transaction per write, so only the failing
write is lost and it is counted, exactly as without grouping.

The queue is bounded: a producer that finds it full waits (on its own thread: for an
event handler, the event loop) until the writer takes a write, and that wait is counted.
A write is never dropped to make room; the memory held is at most ``max_queue`` queued
plus ``max_batch`` in the open transaction. Waits happen only when writes come faster
than the disk takes them for ``max_queue`` writes in a row, and last until the writer
takes the next one (its current group's SQL, not its fsync).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from loguru import logger

T = TypeVar("T")

# Writes (and reads) waiting for the writer; past this, producers wait for room.
MAX_QUEUE = 4096
# Writes per transaction at most, and how long one may gather writes during a flood:
# together they bound how long a completed turn waits for its commit.
MAX_BATCH = 512
MAX_BATCH_SECONDS = 0.05
# A waiting producer re-checks this often that the writer thread is still alive.
WAIT_SLICE = 0.5
# "Queue full" is logged at most this often (a flood would repeat it per write).
FULL_LOG_INTERVAL = 10.0

Write = tuple[Callable[..., None], tuple[Any, ...]]  # job(db, *args)


@dataclass(slots=True)
class _Call:
    """A job whose result (or exception) someone awaits: reads, opening, purging."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: Future[Any]


def transaction(db: sqlite3.Connection, job: Callable[..., T], *args: Any) -> T:
    """Run ``job(db, *args)`` in a transaction of its own."""
    db.execute("BEGIN IMMEDIATE")
    try:
        result = job(db, *args)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # a failed COMMIT (disk full) can leave it open
            db.execute("ROLLBACK")
        raise
    return result


class TranscriptWriter:
    """Runs a store's jobs on one thread; ``db`` is opened by a :meth:`call` on it."""

    def __init__(
        self,
        max_queue: int = MAX_QUEUE,
        max_batch: int = MAX_BATCH,
        max_batch_seconds: float = MAX_BATCH_SECONDS,
    ) -> None:
        if max_queue < 1:
            raise ValueError(f"max_queue must be at least 1, not {max_queue}")
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, not {max_batch}")
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.max_batch_seconds = max_batch_seconds
        self.db: sqlite3.Connection | None = None  # used on the writer thread only
        self._items: deque[Write | _Call] = deque()
        lock = threading.Lock()
        self._not_empty = threading.Condition(lock)
        self._not_full = threading.Condition(lock)
        self._thread: threading.Thread | None = None
        self._stopping = False
        # Producers' figures change under the lock, the writer's on its thread only.
        self.submitted = 0
        self.processed = 0  # committed, or failed and counted
        self.failed = 0
        self.commits = 0
        self.last_ok = True
        self.last_error: str | None = None  # the latest failure, kept after recovery
        self.peak = 0
        self.waits = 0
        self.wait_seconds = 0.0
        self._full_logged = -FULL_LOG_INTERVAL

    # -- producers -------------------------------------------------------------------------

    def submit(self, job: Callable[..., None], *args: Any) -> None:
        """Queue a write to run after everything queued before it; when the queue is full,
        wait for room (never drop)."""
        with self._not_full:
            self._start()
            if len(self._items) >= self.max_queue and not self._wait_for_room():
                self._lost(job.__name__, "the transcript writer thread is not running")
                return
            self._items.append((job, args))
            self.submitted += 1
            self.peak = max(self.peak, len(self._items))
            self._not_empty.notify()

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the writer thread after every job queued before it. When
        the queue is full this waits for room without blocking the event loop."""
        item = _Call(fn, args, Future())
        waited_since: float | None = None
        while not self._offer(item):
            waited_since = waited_since or time.perf_counter()
            await asyncio.sleep(0.002)
        if waited_since is not None:
            with self._not_full:
                self.waits += 1
                self.wait_seconds += time.perf_counter() - waited_since
        return await asyncio.wrap_future(item.future)

    async def stop(self) -> None:
        """Run every queued job, then end the thread."""
        with self._not_full:
            self._stopping = True
            self._not_empty.notify()
            thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join)

    def figures(self) -> dict[str, Any]:
        """For ``/health``: pending and failed writes, commits, and the queue's figures."""
        return {
            "ok": self.last_ok,
            "pending_writes": self.submitted - self.processed,
            "failed_writes": self.failed,
            "last_error": self.last_error,
            "commits": self.commits,
            "queue": {
                "depth": len(self._items),
                "max": self.max_queue,
                "peak": self.peak,
                "waits": self.waits,
                "wait_seconds": round(self.wait_seconds, 6),
            },
        }

    def _start(self) -> None:
        """Start the thread on first use (the lock is held)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="transcripts", daemon=True)
            self._thread.start()

    def _offer(self, item: _Call) -> bool:
        with self._not_full:
            self._start()
            if len(self._items) >= self.max_queue:
                return False
            self._items.append(item)
            self.peak = max(self.peak, len(self._items))
            self._not_empty.notify()
            return True

    def _wait_for_room(self) -> bool:
        """Block until the queue has room (the lock is held); False if it never will."""
        started = time.perf_counter()
        self.waits += 1
        if started - self._full_logged >= FULL_LOG_INTERVAL:
            self._full_logged = started
            logger.warning(
                "transcript queue full ({} writes): producers wait for the disk", self.max_queue
            )
        try:
            while len(self._items) >= self.max_queue:
                if self._thread is None or not self._thread.is_alive():
                    return False
                self._not_full.wait(WAIT_SLICE)
            return True
        finally:
            self.wait_seconds += time.perf_counter() - started

    def _lost(self, name: str, reason: str) -> None:
        self.failed += 1
        self.last_ok = False
        self.last_error = f"{name}: {reason}"
        logger.error("transcript write lost ({}): {}", name, reason)

    # -- the writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        while (item := self._next()) is not None:
            if isinstance(item, _Call):
                self._run_call(item)
            else:
                self._group(item)

    def _next(self) -> Write | _Call | None:
        """The next job, waiting for one; None once stopping with nothing left."""
        with self._not_empty:
            while not self._items:
                if self._stopping:
                    return None
                self._not_empty.wait()
            item = self._items.popleft()
            self._not_full.notify()
            return item

    def _more_writes(self, room: int) -> list[Write]:
        """The writes waiting at the head of the queue (up to a read), without waiting."""
        taken: list[Write] = []
        with self._not_full:
            items = self._items
            while items and len(taken) < room:
                head = items[0]
                if isinstance(head, _Call):
                    break
                taken.append(head)
                items.popleft()
            if taken:
                self._not_full.notify(len(taken))
        return taken

    def _run_call(self, call: _Call) -> None:
        if not call.future.set_running_or_notify_cancel():
            return  # its awaiter was cancelled
        try:
            result = call.fn(*call.args)
        except BaseException as exc:
            call.future.set_exception(exc)
        else:
            call.future.set_result(result)

    def _group(self, first: Write) -> None:
        """Run ``first`` and the writes queued behind it in one transaction."""
        batch = [first]
        deadline = time.monotonic() + self.max_batch_seconds
        db = self.db
        try:
            assert db is not None, "the store is not open"
            db.execute("BEGIN IMMEDIATE")
            first[0](db, *first[1])
            while len(batch) < self.max_batch and time.monotonic() < deadline:
                more = self._more_writes(self.max_batch - len(batch))
                if not more:
                    break  # drained: commit now, so what completed is durable now
                batch += more
                for job, args in more:
                    job(db, *args)
            db.execute("COMMIT")
        except Exception:
            if db is not None and db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error as exc:  # the replay reports what this leaves broken
                    logger.error("transcript rollback failed: {!r}", exc)
            self._replay(batch)
            return
        self.commits += 1
        self.processed += len(batch)
        self.last_ok = True

    def _replay(self, batch: list[Write]) -> None:
        """After a failed group: each write in its own transaction, failures counted."""
        for job, args in batch:
            try:
                assert self.db is not None, "the store is not open"
                transaction(self.db, job, *args)
                self.commits += 1
                self.last_ok = True
            except Exception as exc:
                self.failed += 1
                self.last_ok = False
                self.last_error = f"{job.__name__}: {exc}"
                logger.error("transcript write failed ({}): {!r}", job.__name__, exc)
            finally:
                self.processed += 1
