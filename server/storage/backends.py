"""Which transcript store a server uses: SQLite (a file in the data dir), PostgreSQL (one
database shared by every replica) or memory (nothing written), as the settings say."""

from __future__ import annotations

from server.settings import Settings
from server.storage.memory import MemoryTranscriptStore
from server.storage.store import TranscriptStore


def open_store(settings: Settings) -> TranscriptStore:
    """The store the settings ask for (not yet started)."""
    if settings.storage == "none":
        return MemoryTranscriptStore()
    if settings.storage == "postgres":
        # Imported here: psycopg loads libpq, which a SQLite server never needs.
        from server.storage.postgres import PostgresTranscriptStore

        return PostgresTranscriptStore(
            settings.database_url.get_secret_value(),
            replica=settings.replica_id,
            pool_size=settings.database_pool_size,
            max_queue=settings.database_queue,
        )
    from server.storage.sqlite import SQLiteTranscriptStore

    return SQLiteTranscriptStore(settings.data_dir)
