"""Call recordings: whether calls are recorded, where the files go and what the caller is
told (:mod:`server.storage.recording`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class RecordingSettings(BaseModel):
    """Whether calls are recorded, where, and the notice the caller hears."""

    recording: bool = Field(
        False,
        description="Record every call: both sides as heard (the caller left, the bot "
        "right, as it was played, cut where the caller barged in), Ogg/Opus written as the "
        "call goes. Served by GET /api/sessions/{id}/recording under the transcript's "
        "keys and deleted with it (transcript_retention_days). Needs a transcript store.",
    )
    recording_dir: Path | None = Field(
        None,
        description="Folder for call recordings, one <pc_id>.ogg per call (created if "
        "missing; a volume in Kubernetes). Unset: recordings in data_dir.",
    )
    recording_notice: str = Field(
        "",
        max_length=1000,
        description="With recording: spoken to the caller at the start of each call, "
        'before the greeting ("This call is recorded."); empty for no notice.',
    )
    recording_max_bytes: int = Field(
        5_000_000_000,
        ge=0,
        description="Most bytes of recordings in recording_dir (about 450 hours of calls by "
        "default); past it the recordings last written longest ago are removed, checked at "
        "start-up and every 30 s (/health recordings; logged). Recordings being written "
        "count but are kept. 0: no cap.",
    )
