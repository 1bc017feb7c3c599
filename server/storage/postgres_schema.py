"""The PostgreSQL store's schema: numbered migrations, applied at start-up.

The database holds its schema version (``parley_schema``). A server starting on it
applies the migrations it has and the database lacks, in order and in one transaction,
under an advisory lock, so replicas starting together upgrade it once. A database whose
version is newer than this server knows was upgraded by a newer server: this one refuses
to run on it (it would write rows the newer one does not expect) rather than guess.

Times are whole microseconds since the epoch (``BIGINT``), as in SQLite, so that the
history's keyset ``(started_us, id)`` compares exactly. JSON columns are ``TEXT``: what
``json.dumps`` writes (``\\u0000`` included, which ``jsonb`` refuses). Ids sort by
``COLLATE "C"`` (bytes, as SQLite and Python), whatever the database's locale.
"""

from __future__ import annotations

from psycopg import AsyncConnection

from server.storage.store import StorageError

# pg_advisory_xact_lock key: "parley" in ASCII; replicas starting at once upgrade in turn.
MIGRATION_LOCK = 0x706172_6C6579

# MIGRATIONS[n - 1] brings a database from version n - 1 to n. Never edit a released one:
# add the next.
MIGRATIONS: tuple[str, ...] = (
    # 1: sessions and their turns and events; each session names the replica that wrote it.
    """
    CREATE TABLE sessions (
        id TEXT COLLATE "C" PRIMARY KEY,
        replica TEXT NOT NULL DEFAULT '',
        start_id TEXT,
        started_us BIGINT NOT NULL,
        ended_us BIGINT,
        close_reason TEXT,
        credential TEXT,
        client TEXT NOT NULL DEFAULT '{}',
        usage TEXT NOT NULL DEFAULT '{}',
        turn_count INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX sessions_by_start_key ON sessions (started_us, id);
    CREATE INDEX sessions_by_end ON sessions (ended_us);
    CREATE INDEX sessions_by_start_id ON sessions (start_id);
    CREATE INDEX sessions_open_by_replica ON sessions (replica) WHERE ended_us IS NULL;
    CREATE TABLE entries (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        at_us BIGINT NOT NULL,
        kind TEXT NOT NULL,  -- 'turn' (type = role) or 'event'
        type TEXT NOT NULL,
        text TEXT,
        data TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX entries_by_session ON entries (session_id, seq);
    """,
    # 2: the last group of writes each writer committed, so that a group retried after a
    # connection was lost mid-COMMIT is not applied twice; a caller's history by key.
    """
    CREATE TABLE writer_groups (
        writer TEXT PRIMARY KEY,
        last_group BIGINT NOT NULL,
        at_us BIGINT NOT NULL
    );
    CREATE INDEX sessions_by_credential ON sessions (credential, started_us, id);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class SchemaTooNew(StorageError):
    """The database was upgraded by a newer server than this one."""


async def upgrade(conn: AsyncConnection, target: int = SCHEMA_VERSION) -> tuple[int, int]:
    """Bring the database to version ``target``; returns (version found, version now).
    Raises :class:`SchemaTooNew` when the database is past ``target``."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS parley_schema ("
            "one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), version INTEGER NOT NULL)"
        )
        row = await (await conn.execute("SELECT version FROM parley_schema")).fetchone()
        found = row[0] if row else 0
        if found > target:
            raise SchemaTooNew(
                f"the database's schema is version {found}, newer than this server's "
                f"({target}): it was upgraded by a newer Parley. Run that version (or newer)."
            )
        for version in range(found + 1, target + 1):
            await conn.execute(MIGRATIONS[version - 1].encode())
        await conn.execute(
            "INSERT INTO parley_schema (version) VALUES (%s) "
            "ON CONFLICT (one) DO UPDATE SET version = excluded.version",
            (max(found, target),),
        )
    return found, max(found, target)
