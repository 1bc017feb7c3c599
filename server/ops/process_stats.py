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
import time
import weakref
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from aiortc import RTCPeerConnection

_PROC = Path("/proc/self")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# The best guess at the process's start where the kernel does not say (see below).
_IMPORTED = time.time()

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


@cache
def process_start_time() -> float:
    """When this process started, in seconds since the epoch (Prometheus'
    ``process_start_time_seconds``): a restart shows as a jump, and uptime is now minus it.

    Read from the kernel, not taken at import: the imports and the model loading happen
    after the process began, and the metric must say when it did. ``/proc/self/stat``'s
    field 22 is the start in clock ticks since boot, on the boot-time clock; where that
    clock or ``/proc`` is missing, the boot time from ``/proc/stat`` (whole seconds), and
    last the time this module was imported.
    """
    try:
        stat = (_PROC / "stat").read_text()
        # Fields after the command name, which is in parentheses and may hold spaces.
        ticks = int(stat.rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, AttributeError):
        return _IMPORTED
    if hasattr(time, "CLOCK_BOOTTIME"):
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks)
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return int(line.split()[1]) + ticks
    except (OSError, ValueError):
        pass
    return _IMPORTED


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
