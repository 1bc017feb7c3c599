"""Retention: records of sessions that ended more than ``PARLEY_TRANSCRIPT_RETENTION_DAYS``
ago are deleted at start-up and then hourly, and their call recordings with them."""

from __future__ import annotations

import asyncio
import time

from loguru import logger

from server.storage.recordings import RecordingDirectory
from server.storage.store import TranscriptStore

PURGE_INTERVAL = 3600.0


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
