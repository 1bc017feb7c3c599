"""The PostgreSQL store's writer: a bounded queue, grouped transactions, retries.

One task on the event loop applies the writes in the order they were made: it takes every
write waiting (up to ``max_batch``) and runs them in one transaction, pipelined (sent
without waiting for each answer; a run of writes of one kind is one ``executemany``), then
commits; the writes made meanwhile form the next group. The driver is async, so the loop
never waits on the network.

A database outage never stalls a call. Writes return at once and wait in the queue; the
group in hand is retried (backoff up to :data:`RETRY_MAX`) until the database takes it,
so nothing queued is lost. A group whose COMMIT may or may not have arrived when the
connection broke is not applied twice: each group records its number for this writer
(``writer_groups``) in the same transaction, and a retry first reads it. The queue is
bounded: past ``max_queue`` waiting writes, a new write is dropped (never waited for, which
would stall the call), and the drops are counted by kind and logged. While the database
cannot be reached :meth:`PostgresWriter.figures` says so (``ok: false``), for ``/health``
and ``/ready``; an idle writer probes it every :data:`PROBE_INTERVAL`.

A write the database refuses (not an outage: bad data) fails its group, which is then
replayed one write per transaction, so only that write is lost, and it is counted.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from itertools import groupby
from operator import itemgetter
from typing import Any

import psycopg
from loguru import logger
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from server.storage.store import to_us

# job(conn, rows): the arguments of a run of consecutive writes of one kind.
Job = Callable[[AsyncConnection, list[tuple[Any, ...]]], Awaitable[None]]
Write = tuple[Job, tuple[Any, ...]]

MAX_QUEUE = 20_000
MAX_BATCH = 128
# Seconds to wait for a pooled connection before counting the database as unreachable.
CONNECT_TIMEOUT = 5.0
RETRY_FIRST = 0.2
RETRY_MAX = 5.0
PROBE_INTERVAL = 5.0
# Drops are logged at most this often (a flood during an outage would repeat it per write).
DROP_LOG_INTERVAL = 10.0
# Errors of reaching the database (connection lost, no connection from the pool in time):
# the group is kept and retried; so is an answer of one of these SQLSTATE classes, which
# passes: connection exception, transaction rollback (deadlock, serialization),
# insufficient resources (disk full, too many connections), object not in prerequisite
# state (lock not available), operator intervention (shutting down, starting up).
UNREACHABLE = (psycopg.OperationalError, psycopg.InterfaceError)
TRANSIENT_CLASSES = frozenset({"08", "40", "53", "55", "57"})


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` is the database out of reach or busy (retry), not a write it
    refuses (bad data, a constraint, a value too large for an index: retrying cannot
    help)."""
    if not isinstance(exc, psycopg.Error):
        return False
    sqlstate = exc.sqlstate
    if sqlstate is None:  # no answer from the server: the connection, or the pool
        return isinstance(exc, UNREACHABLE)
    return sqlstate[:2] in TRANSIENT_CLASSES


class PostgresWriter:
    """Applies a store's writes through ``pool``; ``writer`` names it in ``writer_groups``."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        writer: str,
        max_queue: int = MAX_QUEUE,
        max_batch: int = MAX_BATCH,
    ) -> None:
        if max_queue < 1 or max_batch < 1:
            raise ValueError("max_queue and max_batch must be at least 1")
        self.pool = pool
        self.writer = writer
        self.max_queue = max_queue
        self.max_batch = max_batch
        self._items: deque[Write] = deque()
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()  # set (and replaced) after every group
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._group = 0
        self.submitted = 0
        self.processed = 0  # committed, or refused and counted
        self.failed = 0
        self.commits = 0
        self.retries = 0
        self.dropped: Counter[str] = Counter()
        self.lost_at_close = 0
        self.peak = 0
        self.ok = True
        self.last_error: str | None = None  # the latest failure, kept after recovery
        self.failing_since: float | None = None
        self._drop_logged = -DROP_LOG_INTERVAL

    # -- producers -----------------------------------------------------------------------

    def submit(self, job: Job, *args: Any) -> None:
        """Queue a write after every write queued before it; never waits. With the queue
        full (the database slow or down for long) the write is dropped and counted."""
        if self._stopping:
            self.dropped[job.__name__] += 1
            logger.warning("transcript store closed: a {} was dropped", job.__name__)
            return
        if len(self._items) >= self.max_queue:
            self._drop(job.__name__, args[0] if args else None)
            return
        self._items.append((job, args))
        self.submitted += 1
        self.peak = max(self.peak, len(self._items))
        self._wake.set()

    async def flushed(self, within: float) -> None:
        """Return once every write submitted before this call was applied (or refused);
        ``TimeoutError`` when no group was written for ``within`` seconds (the database
        is down; a long queue that is being written is waited for)."""
        target = self.submitted
        while self.processed < target:
            async with asyncio.timeout(within):
                await self._progress.wait()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="postgres-writer")

    async def stop(self, within: float) -> None:
        """Apply every queued write (for up to ``within`` seconds), then end the task;
        what could not be written by then is counted and logged as lost."""
        self._stopping = True
        self._wake.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), within)
        except TimeoutError:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self.lost_at_close = self.submitted - self.processed
            kinds = Counter(job.__name__ for job, _ in self._items)
            logger.error(
                "transcript database unreachable at shutdown: {} writes lost ({})",
                self.lost_at_close, dict(kinds) or "the group in hand",
            )  # fmt: skip

    def figures(self) -> dict[str, Any]:
        """For ``/health``: whether the database takes writes, pending, failed and dropped
        writes, and the queue's figures."""
        return {
            "ok": self.ok,
            "pending_writes": self.submitted - self.processed,
            "failed_writes": self.failed,
            "dropped_writes": sum(self.dropped.values()),
            "dropped_by_kind": dict(self.dropped),
            "last_error": self.last_error,
            "failing_since": self.failing_since,
            "commits": self.commits,
            "retries": self.retries,
            "queue": {"depth": len(self._items), "max": self.max_queue, "peak": self.peak},
        }

    def _drop(self, kind: str, session_id: Any) -> None:
        self.dropped[kind] += 1
        now = time.monotonic()
        if now - self._drop_logged >= DROP_LOG_INTERVAL:
            self._drop_logged = now
            logger.error(
                "transcript queue full ({} writes waiting for the database): dropped a {} of "
                "session {}; dropped so far: {}",
                self.max_queue, kind, session_id, dict(self.dropped),
            )  # fmt: skip

    # -- the writer task ---------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            if not self._items:
                if self._stopping:
                    return
                self._wake.clear()
                try:  # not wait_for: on 3.11 it may swallow a cancellation (gh-86296)
                    async with asyncio.timeout(PROBE_INTERVAL):
                        await self._wake.wait()
                except TimeoutError:
                    await self._probe()
                continue
            count = min(len(self._items), self.max_batch)
            batch = [self._items.popleft() for _ in range(count)]
            await self._apply(batch)
            self.processed += len(batch)
            self._progress.set()
            self._progress = asyncio.Event()

    async def _apply(self, batch: list[Write]) -> None:
        """Commit ``batch`` as one group, retrying while the database is unreachable; if
        the database refuses it, each write alone (only the refused one is lost)."""
        self._group += 1
        group, delay, retrying = self._group, RETRY_FIRST, False
        while True:
            try:
                async with self.pool.connection(timeout=CONNECT_TIMEOUT) as conn:
                    await self._transaction(conn, batch, group, retrying)
            except Exception as exc:
                if transient(exc):
                    self._unreachable(exc, len(batch))
                    retrying = True
                    self.retries += 1
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX)
                    continue
                if len(batch) == 1:  # refused: only this write is lost
                    self._refused(batch[0][0].__name__, exc)
                else:
                    for write in batch:
                        await self._apply([write])
                return
            self.commits += 1
            self._recovered()
            return

    async def _transaction(
        self, conn: AsyncConnection, batch: list[Write], group: int, retrying: bool
    ) -> None:
        async with conn.transaction():
            if retrying:  # the last attempt may have committed before the connection broke
                cur = await conn.execute(
                    "SELECT last_group FROM writer_groups WHERE writer = %s", (self.writer,)
                )
                row = await cur.fetchone()
                if row is not None and row[0] >= group:
                    return
            async with conn.pipeline():
                for job, run in groupby(batch, key=itemgetter(0)):
                    await job(conn, [args for _job, args in run])
                await conn.execute(
                    "INSERT INTO writer_groups (writer, last_group, at_us) VALUES (%s, %s, %s) "
                    "ON CONFLICT (writer) DO UPDATE SET last_group = excluded.last_group, "
                    "at_us = excluded.at_us",
                    (self.writer, group, to_us(time.time())),
                )

    async def _probe(self) -> None:
        """While idle: can the database be reached? (An outage shows without a write.)"""
        try:
            async with self.pool.connection(timeout=CONNECT_TIMEOUT) as conn:
                await conn.execute("SELECT 1")
        except Exception as exc:  # whatever it is, the writer task must live on
            self._unreachable(exc, 0)
        else:
            self._recovered()

    def _unreachable(self, exc: Exception, waiting: int) -> None:
        if self.ok or self.failing_since is None:
            self.failing_since = time.time()
            logger.error(
                "transcript database unreachable ({!r}): {} writes wait in the queue and are "
                "retried", exc, waiting + len(self._items),
            )  # fmt: skip
        self.ok = False
        self.last_error = f"database unreachable: {exc}".strip()

    def _recovered(self) -> None:
        if self.failing_since is not None:
            logger.warning(
                "transcript database back after {:.1f} s; dropped meanwhile: {}",
                time.time() - self.failing_since, dict(self.dropped) or "none",
            )  # fmt: skip
            self.failing_since = None
        self.ok = True

    def _refused(self, kind: str, exc: Exception) -> None:
        self.failed += 1
        self.ok = False
        self.last_error = f"{kind}: {exc}"
        logger.error("transcript write failed ({}): {!r}", kind, exc)
