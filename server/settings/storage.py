"""Session records (transcripts): where they go and how long they are kept."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator


class StorageSettings(BaseModel):
    """Where session records are written and how long they are kept."""

    storage: Literal["sqlite", "postgres", "none"] = Field(
        "sqlite",
        description="Where session records go: sqlite (a file in data_dir, kept across "
        "restarts; one server per file), postgres (the database at database_url, shared "
        "by every replica: /api/history on any replica lists all their calls) or none "
        "(nothing written; live sessions' transcripts only).",
    )
    data_dir: Path = Field(
        Path("data"), description="Folder for the transcript database (created if missing)."
    )
    database_url: SecretStr = Field(
        "",  # validated into a SecretStr; a plain "" is what the reference shows as empty
        validate_default=True,
        description="With storage=postgres: the database, as a libpq URL or key=value string "
        "(postgresql://user:password@host:5432/parley?sslmode=require). The schema is "
        "created or upgraded at start-up; a server refuses a database whose schema is newer.",
    )
    database_pool_size: int = Field(
        4, ge=2, le=100, description="With storage=postgres: connections per server at most."
    )
    database_queue: int = Field(
        20_000,
        ge=100,
        description="With storage=postgres: writes kept in memory while the database is "
        "slow or down, retried until it takes them; past this many, new writes are dropped "
        "and counted (/health storage.dropped_writes), never waited for.",
    )
    transcript_retention_days: float = Field(
        0.0, ge=0, description="Delete records of sessions that ended longer ago (0 = keep)."
    )

    @model_validator(mode="after")
    def _postgres_needs_a_url(self) -> StorageSettings:
        if self.storage == "postgres" and not self.database_url.get_secret_value().strip():
            raise ValueError("storage=postgres needs PARLEY_DATABASE_URL (the database to use)")
        return self
