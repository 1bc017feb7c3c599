"""Session records in PostgreSQL: one database shared by every replica.

``PARLEY_STORAGE=postgres`` with ``PARLEY_DATABASE_URL``. Every replica writes its calls
to the same tables, each session row naming the replica (``PARLEY_REPLICA_ID``) that
wrote it, so ``GET /api/history`` on any replica lists every replica's calls with the same
keyset paging as SQLite, and a transcript can be read on any replica. At start-up the
schema is created or upgraded (:mod:`server.storage.postgres_schema`; a newer one is
refused), and the records this replica's previous process left open are closed, and
only those: the other replicas' live calls stay live.

Writes go through :mod:`server.storage.postgres_writer`: grouped transactions and a
bounded queue, as the SQLite writer; a database outage never stalls a call (writes wait
and are retried; past the bound they are dropped and counted). Reads wait for the writes
made before them, then read through the pool.

The driver is psycopg 3 (with psycopg-pool) rather than asyncpg: it is typed (mypy checks
our calls to it), its pipeline mode sends a whole group of writes in one round trip, its
pool reconnects after an outage and checks a connection before lending it, and it is
PostgreSQL's own maintained adapter (libpq, so every ``sslmode`` and ``PGPASSFILE`` option
of a managed database works as with ``psql``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import psycopg
from loguru import logger
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from server.storage import postgres_writes as writes
from server.storage.postgres_reads import read_record, read_sessions
from server.storage.postgres_schema import SchemaTooNew, upgrade
from server.storage.postgres_writer import MAX_BATCH, MAX_QUEUE, UNREACHABLE, PostgresWriter
from server.storage.sqlite import CRASHED
from server.storage.store import SessionRecord, SessionSummary, StorageError, to_us

POOL_SIZE = 4
# Seconds start-up waits for the database (whole: libpq's connect_timeout), and a read
# for the writes made before it.
START_TIMEOUT = 15
READ_TIMEOUT = 5.0
# Seconds shutdown waits for queued writes while the database is down.
CLOSE_TIMEOUT = 5.0


def describe(url: str) -> str:
    """The database as logs and ``/health`` may show it: no password."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(an unreadable PARLEY_DATABASE_URL)"
    where = f"{parts.get('host', 'localhost')}:{parts.get('port', 5432)}"
    return f"{parts.get('user', '')}@{where}/{parts.get('dbname', '')}".lstrip("@")


class PostgresTranscriptStore:
    """A :class:`server.storage.store.TranscriptStore` in the database at ``url``."""

    name = "postgres"

    def __init__(
        self,
        url: str,
        *,
        replica: str = "",
        pool_size: int = POOL_SIZE,
        max_queue: int = MAX_QUEUE,
        max_batch: int = MAX_BATCH,
        close_timeout: float = CLOSE_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        self._url = url
        self.database = describe(url)
        self.replica = replica
        self.close_timeout = close_timeout
        self.read_timeout = read_timeout
        self.schema: tuple[int, int] | None = None  # (version found, version now)
        self._pool = AsyncConnectionPool(
            url, min_size=1, max_size=pool_size, open=False, name="parley-transcripts",
            check=AsyncConnectionPool.check_connection,
            kwargs={"autocommit": True, "application_name": f"parley {replica}".strip()},
        )  # fmt: skip
        # This process's writes: a retried group is recognised by it (writer_groups).
        writer = f"{replica}:{uuid.uuid4().hex}"
        self._writer = PostgresWriter(self._pool, writer, max_queue, max_batch)
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        try:
            # A connection of its own first: its error says why (the pool's would not).
            async with await psycopg.AsyncConnection.connect(
                self._url, autocommit=True, connect_timeout=START_TIMEOUT
            ) as conn:
                self.schema = await upgrade(conn)
                recovered = await _recover(conn, self.replica)
            await self._pool.open(wait=True, timeout=START_TIMEOUT)
        except SchemaTooNew:
            await self._pool.close()
            self._closed = True
            raise
        except psycopg.Error as exc:
            await self._pool.close()
            self._closed = True
            raise StorageError(
                f"cannot keep transcripts in PostgreSQL at {self.database}: {exc}. Check "
                "PARLEY_DATABASE_URL and that the database is up, or set PARLEY_STORAGE=sqlite."
            ) from None
        self._writer.start()
        if self.schema[0] != self.schema[1]:
            logger.info("transcript schema upgraded from {} to {}", *self.schema)
        if recovered:
            logger.warning(
                "{} session records of replica {!r} were left open by a crash: closed",
                recovered, self.replica,
            )  # fmt: skip
        logger.info("transcripts stored in PostgreSQL at {}", self.database)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._writer.stop(self.close_timeout)
        await self._pool.close()

    def status(self) -> dict[str, Any]:
        version = self.schema[1] if self.schema else None
        return {
            "backend": self.name, "database": self.database, "replica": self.replica,
            "schema_version": version, **self._writer.figures(),
        }  # fmt: skip

    # -- writes -------------------------------------------------------------------------------

    def open_session(
        self, session_id: str, start_id: str | None, client: dict[str, Any], at: float
    ) -> None:
        credential = client.get("credential")
        self._writer.submit(
            writes.open_session, session_id, self.replica, start_id,
            writes.dump_clean(client), credential, to_us(at),
        )  # fmt: skip

    def update_client(self, session_id: str, client: dict[str, Any]) -> None:
        credential = client.get("credential")
        self._writer.submit(writes.update_client, session_id, writes.dump_clean(client), credential)

    def append_turn(
        self,
        session_id: str,
        role: Literal["user", "assistant"],
        text: str,
        at: float,
        *,
        started_at: str | None = None,
        interrupted: bool = False,
        metrics: dict[str, Any] | None = None,
        usage: dict[str, Any] | None = None,
    ) -> None:
        data = {"started_at": started_at, "interrupted": interrupted, "metrics": metrics}
        usage_json = writes.dump_clean(usage) if usage is not None else None
        self._writer.submit(
            writes.append_turn, session_id, role, writes.clean(text), to_us(at),
            writes.dump_clean(data), usage_json,
        )  # fmt: skip

    def append_event(self, session_id: str, type_: str, data: dict[str, Any], at: float) -> None:
        self._writer.submit(
            writes.append_event, session_id, type_, writes.dump_clean(data), to_us(at)
        )

    def fold_last_turn(self, session_id: str) -> None:
        self._writer.submit(writes.fold_last_turn, session_id)

    def close_session(
        self, session_id: str, reason: str, at: float, usage: dict[str, Any] | None = None
    ) -> None:
        usage_json = writes.dump_clean(usage) if usage is not None else None
        self._writer.submit(
            writes.close_session, session_id, writes.clean(reason), to_us(at), usage_json
        )

    # -- reads ----------------------------------------------------------------------------------

    async def get(self, session_id: str) -> SessionRecord | None:
        async with self._reading() as conn:
            return await read_record(conn, session_id)

    async def list_sessions(
        self,
        limit: int = 50,
        before: float | None = None,
        credential: str | None = None,
        before_id: str | None = None,
    ) -> list[SessionSummary]:
        async with self._reading() as conn:
            return await read_sessions(conn, limit, before, credential, before_id)

    async def purge(self, older_than: float) -> int:
        async with self._reading() as conn:
            return await _purge(conn, to_us(older_than), self._writer.writer)

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        """A pooled connection once the writes made before are applied; an unreachable
        database is a :class:`StorageError` saying so."""
        writer = self._writer
        try:
            await writer.flushed(self.read_timeout)
            async with self._pool.connection(timeout=self.read_timeout) as conn:
                yield conn
        except (TimeoutError, *UNREACHABLE) as exc:
            pending = writer.submitted - writer.processed
            raise StorageError(
                f"the transcript database ({self.database}) is unreachable: "
                f"{writer.last_error or repr(exc)}; {pending} writes wait to be written"
            ) from None


async def _recover(conn: AsyncConnection, replica: str) -> int:
    """Close the records ``replica``'s last process left open (it ended no later than its
    last entry); other replicas' records are theirs."""
    cur = await conn.execute(
        "UPDATE sessions SET close_reason = %s, ended_us = COALESCE((SELECT MAX(at_us) "
        "FROM entries WHERE entries.session_id = sessions.id), started_us) "
        "WHERE ended_us IS NULL AND replica = %s",
        (CRASHED, replica),
    )
    return cur.rowcount


async def _purge(conn: AsyncConnection, older_than_us: int, writer: str) -> int:
    # Live sessions never go; an ended one's entries go with it (ON DELETE CASCADE), and
    # so do the group numbers of writers (past processes) silent since then.
    async with conn.transaction():
        cur = await conn.execute(
            "DELETE FROM sessions WHERE ended_us IS NOT NULL AND ended_us < %s",
            (older_than_us,),
        )
        await conn.execute(
            "DELETE FROM writer_groups WHERE at_us < %s AND writer <> %s",
            (older_than_us, writer),
        )
    return cur.rowcount
