"""Figures about this server process: memory, file descriptors, threads, tasks, peers.

What a leak would show: sessions that are gone but whose tasks, sockets, threads or
peer connections are not. :func:`process_stats` is cheap (a few small reads from
``/proc``, by :mod:`server.process.proc`, the reader ``/metrics`` uses too), so ``/health``
reports it on every call.
Peer connections are counted by a weak set that :func:`watch_peer_connection` fills:
an entry stays as long as something still holds the object, closed or not.
"""

from __future__ import annotations

import asyncio
import resource
import threading
import weakref
from dataclasses import asdict, dataclass
from typing import Any

from aiortc import RTCPeerConnection

from server.process.proc import ProcReader

_READER = ProcReader()

# Process-wide by nature: every peer connection this process made and still holds.
_peer_connections: weakref.WeakSet[RTCPeerConnection] = weakref.WeakSet()


def watch_peer_connection(pc: RTCPeerConnection) -> RTCPeerConnection:
    """Count ``pc`` while it lives; returns it."""
    _peer_connections.add(pc)
    return pc


@dataclass(frozen=True)
class ProcessStats:
    rss_bytes: int
    open_fds: int
    threads: int
    asyncio_tasks: int
    peer_connections: int  # objects alive (closed ones not yet freed included)
    peer_connections_open: int  # not closed

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fallback_rss_bytes() -> int:
    # Peak rather than current resident memory, where there is no /proc.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def asyncio_task_count() -> int:
    """Tasks of the running event loop (0 when called outside one)."""
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:
        return 0


def process_stats() -> ProcessStats:
    """The figures now: rss, fds and threads from :mod:`server.process.proc` (as ``/metrics``
    reads them), the rest from this process's own objects."""
    pcs = list(_peer_connections)
    figures = _READER.read()
    return ProcessStats(
        rss_bytes=_fallback_rss_bytes() if figures.rss_bytes is None else int(figures.rss_bytes),
        open_fds=-1 if figures.open_fds is None else figures.open_fds,
        threads=threading.active_count() if figures.threads is None else figures.threads,
        asyncio_tasks=asyncio_task_count(),
        peer_connections=len(pcs),
        peer_connections_open=sum(1 for pc in pcs if pc.connectionState != "closed"),
    )
