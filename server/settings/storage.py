"""Session records (transcripts): where they go and how long they are kept."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


class StorageSettings(BaseModel):
    """Where session records are written and how long they are kept."""

    storage: Literal["sqlite", "none"] = Field(
        "sqlite",
        description="Where session records go: sqlite (a file in data_dir, kept across "
        "restarts) or none (nothing written; live sessions' transcripts only).",
    )
    data_dir: Path = Field(
        Path("data"), description="Folder for the transcript database (created if missing)."
    )
    transcript_retention_days: float = Field(
        0.0, ge=0, description="Delete records of sessions that ended longer ago (0 = keep)."
    )
