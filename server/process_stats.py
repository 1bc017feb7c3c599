"""Figures about this server process: memory, file descriptors, threads, tasks, peers.

What a leak would show: sessions that are gone but whose tasks, sockets, threads or
peer connections are not. :func:`process_stats` is cheap (a few small reads from
``/proc``), so ``/health`` reports it on every call and a metrics exporter can reuse it.
Peer connections are counted by a weak set that :func:`watch_peer_connection` fills:
an entry stays as long as something still holds the object, closed or not.
"""

from __future__ import annotations

import asyncio
import os
import resource
import threading
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aiortc import RTCPeerConnection

_PROC = Path("/proc/self")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

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


def rss_bytes() -> int:
    """Resident memory now (peak resident memory where /proc is missing)."""
    try:
        return int((_PROC / "statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def open_fds() -> int:
    try:
        return len(os.listdir(_PROC / "fd")) - 1  # minus the one listdir itself opened
    except OSError:
        return -1


def thread_count() -> int:
    """OS threads (native pools such as onnxruntime's included), else Python threads."""
    try:
        for line in (_PROC / "status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return threading.active_count()


def asyncio_task_count() -> int:
    """Tasks of the running event loop (0 when called outside one)."""
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:
        return 0


def process_stats() -> ProcessStats:
    pcs = list(_peer_connections)
    return ProcessStats(
        rss_bytes=rss_bytes(),
        open_fds=open_fds(),
        threads=thread_count(),
        asyncio_tasks=asyncio_task_count(),
        peer_connections=len(pcs),
        peer_connections_open=sum(1 for pc in pcs if pc.connectionState != "closed"),
    )
