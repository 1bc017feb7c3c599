"""Where call recordings are kept: one Ogg/Opus file per session in a folder
(``PARLEY_RECORDING_DIR``, by default ``recordings`` in the data dir; a volume in
Kubernetes), named by the session's pc_id, the id its transcript is kept under.

Whether a session has a recording is whether its file is there: the transcript store
knows nothing of recordings. Retention deletes files last written (when their call
ended) before the cut-off, the transcripts' rule. The folder is capped
(``PARLEY_RECORDING_MAX_BYTES``): past it the recordings last written longest ago go
first. Every method here but :meth:`RecordingDirectory.status` touches the disk: call
them in a thread.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from loguru import logger

from server.settings import Settings

SUFFIX = ".ogg"
MEDIA_TYPE = "audio/ogg"
# A recording written this recently is a call's in progress (its worker writes every
# half second): counted against the cap, never removed (its space stays taken until
# the call ends anyway, and the call would lose its recording).
LIVE_SECONDS = 60.0
# What one read of a recording being served takes into memory.
CHUNK_BYTES = 64 * 1024
# Ids as the registry makes them (an optional replica prefix and a dot, then URL-safe
# base64); anything else never names a file.
_SAFE_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")


@dataclass(frozen=True, slots=True)
class CapSweep:
    """What one pass of the cap found and did: recordings removed, and those left."""

    removed: int = 0
    removed_bytes: int = 0
    files: int = 0
    bytes: int = 0


class RecordingDirectory:
    """The folder of call recordings, capped at ``max_bytes`` (0: no cap)."""

    def __init__(self, folder: Path, max_bytes: int = 0) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.last_sweep = CapSweep()
        # Since the server started (one writer: the task that sweeps, in its thread).
        self.removed_over_cap = self.removed_over_cap_bytes = 0

    @classmethod
    def of(cls, settings: Settings) -> RecordingDirectory:
        """The folder the settings name (whether or not new calls are recorded: the
        recordings already made are served, expire and are capped all the same)."""
        folder = settings.recording_dir or settings.data_dir / "recordings"
        return cls(folder, settings.recording_max_bytes)

    def path(self, session_id: str) -> Path | None:
        """Where ``session_id``'s recording goes; None for an id that cannot be a file's."""
        if not _SAFE_ID.fullmatch(session_id):
            return None
        return self.folder / f"{session_id}{SUFFIX}"

    def has(self, session_id: str) -> bool:
        path = self.path(session_id)
        return path is not None and path.is_file()

    def open_written(self, session_id: str) -> tuple[BinaryIO, int] | None:
        """``session_id``'s recording opened, with its size now (what is written so far
        of a live one); None if there is none."""
        path = self.path(session_id)
        if path is None:
            return None
        try:
            file = path.open("rb")
        except OSError:  # none, or gone (retention, the cap) since it was listed
            return None
        return file, os.fstat(file.fileno()).st_size

    def cap(self) -> CapSweep:
        """Remove recordings, last written longest ago first, until the folder holds at
        most ``max_bytes``; those still being written (``LIVE_SECONDS``) are counted but
        kept. Returns (and keeps, for :meth:`status`) what it found and did."""
        found = self._recordings()
        total = sum(size for _, size, _ in found)
        removed = removed_bytes = 0
        if self.max_bytes > 0 and total > self.max_bytes:
            live_since = time.time() - LIVE_SECONDS
            for path, size, mtime in found:  # oldest first: from a live one on, all are
                if total <= self.max_bytes or mtime >= live_since:
                    break
                try:
                    path.unlink()
                except OSError as exc:  # one file in the way: the others still go
                    logger.warning("removing the recording {} failed: {!r}", path.name, exc)
                    continue
                total -= size
                removed, removed_bytes = removed + 1, removed_bytes + size
        self.removed_over_cap += removed
        self.removed_over_cap_bytes += removed_bytes
        self.last_sweep = CapSweep(removed, removed_bytes, len(found) - removed, total)
        return self.last_sweep

    def status(self) -> dict[str, Any]:
        """The folder as the last sweep of the cap found it, and what the cap removed
        since the server started (for /health)."""
        return {
            "max_bytes": self.max_bytes,
            "files": self.last_sweep.files,
            "bytes": self.last_sweep.bytes,
            "removed_over_cap": self.removed_over_cap,
            "removed_over_cap_bytes": self.removed_over_cap_bytes,
        }

    def _recordings(self) -> list[tuple[Path, int, float]]:
        """(path, size, last written) of every recording, last written longest ago first."""
        found = []
        try:
            files = list(self.folder.glob(f"*{SUFFIX}"))
        except OSError:
            return []  # no folder yet: nothing recorded
        for path in files:
            try:
                stat = path.stat()
            except OSError:  # gone meanwhile
                continue
            found.append((path, stat.st_size, stat.st_mtime))
        found.sort(key=lambda entry: (entry[2], entry[0].name))
        return found

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


def read_chunks(file: BinaryIO, size: int, chunk: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The first ``size`` bytes of ``file`` (what was written when it was asked for: a
    live recording goes on growing), ``chunk`` at a time; closes it at the end."""
    with file:
        left = size
        while left > 0:
            data = file.read(min(chunk, left))
            if not data:  # cut short meanwhile
                return
            left -= len(data)
            yield data
