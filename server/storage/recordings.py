"""Where call recordings are kept: one Ogg/Opus file per session in a folder
(``PARLEY_RECORDING_DIR``, by default ``recordings`` in the data dir; a volume in
Kubernetes), named by the session's pc_id, the id its transcript is kept under.

Whether a session has a recording is whether its file is there: the transcript store
knows nothing of recordings. Retention deletes files last written (when their call
ended) before the cut-off, the transcripts' rule. Every method here touches the disk:
call them in a thread.
"""

from __future__ import annotations

import re
from pathlib import Path

from loguru import logger

from server.settings import Settings

SUFFIX = ".ogg"
MEDIA_TYPE = "audio/ogg"
# Ids as the registry makes them (an optional replica prefix and a dot, then URL-safe
# base64); anything else never names a file.
_SAFE_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")


class RecordingDirectory:
    """The folder of call recordings."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def of(cls, settings: Settings) -> RecordingDirectory:
        """The folder the settings name (whether or not new calls are recorded: the
        recordings already made are served and expire all the same)."""
        return cls(settings.recording_dir or settings.data_dir / "recordings")

    def path(self, session_id: str) -> Path | None:
        """Where ``session_id``'s recording goes; None for an id that cannot be a file's."""
        if not _SAFE_ID.fullmatch(session_id):
            return None
        return self.folder / f"{session_id}{SUFFIX}"

    def has(self, session_id: str) -> bool:
        path = self.path(session_id)
        return path is not None and path.is_file()

    def purge(self, older_than: float) -> int:
        """Delete recordings last written before ``older_than`` (epoch seconds); how many."""
        purged = 0
        try:
            files = list(self.folder.glob(f"*{SUFFIX}"))
        except OSError:
            return 0  # no folder yet: nothing recorded
        for path in files:
            try:
                if path.stat().st_mtime < older_than:
                    path.unlink()
                    purged += 1
            except OSError as exc:  # one file in the way: the others still go
                logger.warning("deleting the recording {} failed: {!r}", path.name, exc)
        return purged
