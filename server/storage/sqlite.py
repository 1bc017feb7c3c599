"""Session records in SQLite: one file under the data dir, written by one thread.

The connection belongs to a single writer thread (:mod:`server.storage.sqlite_writer`); every
write and read is a job for it, so the event loop never waits on the disk and jobs run in
the order they were made (a read sees every write before it). Writes are grouped into
transactions in WAL mode with ``synchronous=FULL``, each committed as soon as the writer
has caught up: once a turn's group has committed it survives a crash of the process or
of the machine. The writer's queue is bounded; producers wait when it is full, and no
write is dropped. A lock file keeps a second server off the same data dir, which is what
makes it safe to close, at start-up, the records a crash left open.
"""

from __future__ import annotations

import fcntl
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal

from loguru import logger

from server.storage.sqlite_writer import MAX_BATCH, MAX_QUEUE, TranscriptWriter, transaction
from server.storage.store import (
    SUMMARY_COLUMNS,
    RecordedEvent,
    SessionRecord,
    SessionSummary,
    StorageError,
    Turn,
    from_us,
    summary_from_row,
    to_us,
)

DB_NAME = "transcripts.db"
LOCK_NAME = "transcripts.lock"
SCHEMA_VERSION = 1
# Tool results and the like are stored whole up to this size, then cut.
MAX_DATA_CHARS = 16_384
CRASHED = "server stopped unexpectedly"

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    start_id TEXT,
    started_us INTEGER NOT NULL,
    ended_us INTEGER,
    close_reason TEXT,
    client TEXT NOT NULL DEFAULT '{}',
    usage TEXT NOT NULL DEFAULT '{}',
    turn_count INTEGER NOT NULL DEFAULT 0
);
-- History pages by the keyset (started_us, id); this index replaced one on started_us.
DROP INDEX IF EXISTS sessions_by_start;
CREATE INDEX IF NOT EXISTS sessions_by_start_key ON sessions (started_us, id);
CREATE INDEX IF NOT EXISTS sessions_by_end ON sessions (ended_us);
CREATE INDEX IF NOT EXISTS sessions_by_start_id ON sessions (start_id);
CREATE TABLE IF NOT EXISTS entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    at_us INTEGER NOT NULL,
    kind TEXT NOT NULL,  -- 'turn' (type = role) or 'event'
    type TEXT NOT NULL,
    text TEXT,
    data TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS entries_by_session ON entries (session_id, seq);
"""


def dump(data: Any) -> str:
    """JSON for a column; never raises (a conversation must not fail over its record)."""
    try:
        text = json.dumps(data, ensure_ascii=False, default=str)
    except (TypeError, ValueError) as exc:  # e.g. a circular structure
        text = json.dumps({"unserializable": f"{exc}: {data!r}"[:MAX_DATA_CHARS]})
    if len(text) > MAX_DATA_CHARS:
        text = json.dumps({"truncated": text[:MAX_DATA_CHARS]}, ensure_ascii=False)
    return text


class SQLiteTranscriptStore:
    """A :class:`server.storage.store.TranscriptStore` in ``<data_dir>/transcripts.db``."""

    name = "sqlite"

    def __init__(
        self, data_dir: Path, *, max_queue: int = MAX_QUEUE, max_batch: int = MAX_BATCH
    ) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / DB_NAME
        self._writer = TranscriptWriter(max_queue=max_queue, max_batch=max_batch)
        self._lock: IO[str] | None = None
        self._closed = False

    @property
    def _db(self) -> sqlite3.Connection | None:
        """The connection (on the writer thread only)."""
        return self._writer.db

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        try:
            recovered = await self._writer.call(self._open)
        except (OSError, sqlite3.Error, StorageError) as exc:
            await self._writer.call(self._release)
            await self._writer.stop()
            self._closed = True
            raise StorageError(
                f"cannot keep transcripts in {self.path}: {exc}. Set PARLEY_DATA_DIR to a "
                "writable folder, or PARLEY_STORAGE=none to keep no transcripts."
            ) from None
        if recovered:
            logger.warning("{} session records were left open by a crash: closed", recovered)
        logger.info("transcripts stored in {}", self.path)

    def _open(self) -> int:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock = (self.data_dir / LOCK_NAME).open("w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StorageError(f"another Parley server uses {self.data_dir}") from None
        db = sqlite3.connect(self.path, isolation_level=None)
        self._writer.db = db
        if db.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
            raise sqlite3.OperationalError("the database refused WAL mode")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA busy_timeout=5000")
        db.executescript(SCHEMA)
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        # Nobody else writes here (the lock), so a record still open was left by a crash:
        # it ended no later than its last entry.
        return db.execute(
            "UPDATE sessions SET close_reason = ?, ended_us = COALESCE("
            "(SELECT MAX(at_us) FROM entries WHERE entries.session_id = sessions.id), "
            "started_us) WHERE ended_us IS NULL",
            (CRASHED,),
        ).rowcount

    def _release(self) -> None:
        if self._writer.db is not None:
            self._writer.db.close()
            self._writer.db = None
        if self._lock is not None:
            self._lock.close()  # also releases the flock
            self._lock = None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._writer.call(self._release)  # after every write queued before it
        await self._writer.stop()

    def status(self) -> dict[str, Any]:
        return {"backend": self.name, "path": str(self.path), **self._writer.figures()}

    def _submit(self, job: Callable[..., None], *args: Any) -> None:
        """Queue a write; it runs after every write queued before it."""
        if self._closed:
            logger.warning("transcript store closed: a {} was dropped", job.__name__)
            return
        self._writer.submit(job, *args)

    # -- writes -------------------------------------------------------------------------------

    def open_session(
        self, session_id: str, start_id: str | None, client: dict[str, Any], at: float
    ) -> None:
        self._submit(_open_session, session_id, start_id, dump(client), to_us(at))

    def update_client(self, session_id: str, client: dict[str, Any]) -> None:
        self._submit(_update_client, session_id, dump(client))

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
        usage_json = dump(usage) if usage is not None else None
        self._submit(_append_turn, session_id, role, text, to_us(at), dump(data), usage_json)

    def append_event(self, session_id: str, type_: str, data: dict[str, Any], at: float) -> None:
        self._submit(_append_event, session_id, type_, dump(data), to_us(at))

    def fold_last_turn(self, session_id: str) -> None:
        self._submit(_fold_last_turn, session_id)

    def close_session(
        self, session_id: str, reason: str, at: float, usage: dict[str, Any] | None = None
    ) -> None:
        usage_json = dump(usage) if usage is not None else None
        self._submit(_close_session, session_id, reason, to_us(at), usage_json)

    # -- reads ----------------------------------------------------------------------------------

    async def get(self, session_id: str) -> SessionRecord | None:
        return await self._writer.call(self._get, session_id)

    async def list_sessions(
        self,
        limit: int = 50,
        before: float | None = None,
        credential: str | None = None,
        before_id: str | None = None,
    ) -> list[SessionSummary]:
        return await self._writer.call(self._list, limit, before, credential, before_id)

    async def purge(self, older_than: float) -> int:
        return await self._writer.call(self._purge, to_us(older_than))

    def _get(self, session_id: str) -> SessionRecord | None:
        assert self._db is not None
        row = self._db.execute(
            f"SELECT {SUMMARY_COLUMNS}, client, usage FROM sessions WHERE id = ? "
            "OR start_id = ? ORDER BY id = ? DESC, started_us DESC LIMIT 1",
            (session_id, session_id, session_id),
        ).fetchone()
        if row is None:
            return None
        summary = summary_from_row(row)
        record = SessionRecord(
            **summary.model_dump(), client=json.loads(row[7]), usage=json.loads(row[8])
        )
        entries = self._db.execute(
            "SELECT seq, at_us, kind, type, text, data FROM entries WHERE session_id = ? "
            "ORDER BY seq",
            (summary.id,),
        )
        for seq, at_us, kind, type_, text, data in entries:
            fields = json.loads(data)
            if kind == "turn":
                record.turns.append(
                    Turn(seq=seq, role=type_, text=text, at=from_us(at_us), **fields)
                )
            else:
                record.events.append(
                    RecordedEvent(seq=seq, type=type_, at=from_us(at_us), data=fields)
                )
        return record

    def _list(
        self, limit: int, before: float | None, credential: str | None, before_id: str | None
    ) -> list[SessionSummary]:
        assert self._db is not None
        conditions: list[str] = []
        args: list[Any] = []
        if before is not None and before_id is not None:
            # The keyset of the ordering below: sessions that started in the same
            # microsecond as the last one listed are not skipped.
            conditions.append("(started_us < ? OR (started_us = ? AND id < ?))")
            args += [to_us(before), to_us(before), before_id]
        elif before is not None:
            conditions.append("started_us < ?")
            args.append(to_us(before))
        if credential is not None:
            conditions.append("json_extract(client, '$.credential') = ?")
            args.append(credential)
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        rows = self._db.execute(
            f"SELECT {SUMMARY_COLUMNS} FROM sessions {where} "
            "ORDER BY started_us DESC, id DESC LIMIT ?",
            (*args, limit),
        )
        return [summary_from_row(row) for row in rows]

    def _purge(self, older_than_us: int) -> int:
        assert self._db is not None
        return transaction(self._db, _purge, older_than_us)


# -- the write jobs (each runs inside its own transaction) -----------------------------------


def _open_session(
    db: sqlite3.Connection, session_id: str, start_id: str | None, client: str, at_us: int
) -> None:
    # A restarted peer connection keeps its pc_id: the record continues, open again.
    db.execute(
        "INSERT INTO sessions (id, start_id, started_us, client) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET ended_us = NULL, close_reason = NULL, "
        "client = excluded.client",
        (session_id, start_id, at_us, client),
    )


def _update_client(db: sqlite3.Connection, session_id: str, client: str) -> None:
    db.execute("UPDATE sessions SET client = ? WHERE id = ?", (client, session_id))


def _append_turn(
    db: sqlite3.Connection,
    session_id: str,
    role: str,
    text: str,
    at_us: int,
    data: str,
    usage: str | None,
) -> None:
    db.execute(
        "INSERT INTO entries (session_id, at_us, kind, type, text, data) "
        "VALUES (?, ?, 'turn', ?, ?, ?)",
        (session_id, at_us, role, text, data),
    )
    db.execute(
        "UPDATE sessions SET turn_count = turn_count + 1, usage = COALESCE(?, usage) WHERE id = ?",
        (usage, session_id),
    )


def _append_event(
    db: sqlite3.Connection, session_id: str, type_: str, data: str, at_us: int
) -> None:
    db.execute(
        "INSERT INTO entries (session_id, at_us, kind, type, data) VALUES (?, ?, 'event', ?, ?)",
        (session_id, at_us, type_, data),
    )


def _fold_last_turn(db: sqlite3.Connection, session_id: str) -> None:
    folded = db.execute(
        "UPDATE entries SET kind = 'event', type = 'turn-merged', text = NULL, "
        "data = json_set(data, '$.role', type, '$.text', text) "
        "WHERE session_id = ? AND kind = 'turn' AND seq >= (SELECT MAX(seq) FROM entries "
        "WHERE session_id = ? AND kind = 'turn' AND type = 'user')",
        (session_id, session_id),
    ).rowcount
    db.execute("UPDATE sessions SET turn_count = turn_count - ? WHERE id = ?", (folded, session_id))


def _purge(db: sqlite3.Connection, older_than_us: int) -> int:
    # Live sessions never go; an ended one's entries go with it (ON DELETE CASCADE).
    return db.execute(
        "DELETE FROM sessions WHERE ended_us IS NOT NULL AND ended_us < ?", (older_than_us,)
    ).rowcount


def _close_session(
    db: sqlite3.Connection, session_id: str, reason: str, at_us: int, usage: str | None
) -> None:
    db.execute(
        "UPDATE sessions SET ended_us = ?, close_reason = ?, usage = COALESCE(?, usage) "
        "WHERE id = ?",
        (at_us, reason, usage, session_id),
    )
