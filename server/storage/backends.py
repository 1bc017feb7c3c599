"""Which transcript store a server uses: SQLite (a file in the data dir) or memory (nothing
written), as the settings say."""

from __future__ import annotations

from server.settings import Settings
from server.storage.memory import MemoryTranscriptStore
from server.storage.sqlite import SQLiteTranscriptStore
from server.storage.store import TranscriptStore


def open_store(settings: Settings) -> TranscriptStore:
    """The store the settings ask for (not yet started)."""
    if settings.storage == "none":
        return MemoryTranscriptStore()
    return SQLiteTranscriptStore(settings.data_dir)
