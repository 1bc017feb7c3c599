"""Retention: records of sessions that ended more than ``PARLEY_TRANSCRIPT_RETENTION_DAYS``
ago are deleted at start-up and then hourly, and their call recordings with them; the
recordings folder is kept under ``PARLEY_RECORDING_MAX_BYTES`` at start-up and every
``CAP_INTERVAL`` seconds (the oldest go first)."""

from __future__ import annotations

import asyncio
import time

from loguru import logger

from server.storage.recordings import RecordingDirectory
from server.storage.store import TranscriptStore

PURGE_INTERVAL = 3600.0
# Between two sweeps of the cap the folder grows by what the live calls write (20 calls:
# about 2 MB in 30 s) and the calls started meanwhile; a sweep stats every recording.
CAP_INTERVAL = 30.0


async def purge_expired(
    store: TranscriptStore, retention_days: float, recordings: RecordingDirectory | None = None
) -> int:
    """Delete records that ended more than ``retention_days`` ago (0: keep forever), and
    the ``recordings`` last written as long ago. A failure is logged (and shows in
    /health), never raised: records are kept."""
    if retention_days <= 0:
        return 0
    cutoff = time.time() - retention_days * 86400
    if recordings is not None:
        removed = await asyncio.to_thread(recordings.purge, cutoff)
        if removed:
            logger.info("deleted {} call recordings older than {} days", removed, retention_days)
    try:
        purged = await store.purge(cutoff)
    except Exception as exc:
        logger.warning("purging old session records failed: {!r}", exc)
        return 0
    if purged:
        logger.info("purged {} session records older than {} days", purged, retention_days)
    return purged


async def keep_purging(
    store: TranscriptStore, retention_days: float, recordings: RecordingDirectory | None = None
) -> None:
    """Purge expired records (and recordings) every :data:`PURGE_INTERVAL` seconds, for ever."""
    while True:
        await asyncio.sleep(PURGE_INTERVAL)
        await purge_expired(store, retention_days, recordings)


async def enforce_cap(recordings: RecordingDirectory) -> int:
    """Remove the oldest recordings past the folder's cap (in a thread); how many. A
    failure is logged, never raised."""
    if recordings.max_bytes <= 0:
        return 0
    try:
        sweep = await asyncio.to_thread(recordings.cap)
    except Exception as exc:
        logger.warning("capping the recordings folder failed: {!r}", exc)
        return 0
    if sweep.removed:
        logger.warning(
            "removed {} call recordings ({:.1f} MB), the oldest: the folder was over "
            "PARLEY_RECORDING_MAX_BYTES ({:.1f} MB); {} left, {:.1f} MB",
            sweep.removed, sweep.removed_bytes / 1e6, recordings.max_bytes / 1e6,
            sweep.files, sweep.bytes / 1e6,
        )  # fmt: skip
    return sweep.removed


async def keep_capped(recordings: RecordingDirectory) -> None:
    """Keep the recordings folder under its cap every :data:`CAP_INTERVAL` s, for ever."""
    while True:
        await asyncio.sleep(CAP_INTERVAL)
        await enforce_cap(recordings)
