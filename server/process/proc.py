"""The one reader of a process's figures from ``/proc/<pid>``: CPU time, resident memory,
open file descriptors, threads and start time.

It is prometheus_client's :class:`ProcessCollector`, so ``/metrics`` (its ``process_*``
families), ``/health``'s ``process`` block (:mod:`server.process.stats`) and the
benches' CPU/RSS sampler (:class:`testkit.measure.ProcSampler`, for another process's pid)
all read the same files the same way.

What counts as an open file descriptor: every entry of ``/proc/<pid>/fd`` when it is
listed. Reading our own process, that includes the one descriptor the listing itself holds
open, as in every Prometheus client library's ``process_open_fds``; so an idle server shows
one more than it keeps open between requests, in ``/health`` and ``/metrics`` alike.

Threads are the kernel's count (native pools such as onnxruntime's included), from the
same ``stat`` file, which the collector does not export.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from prometheus_client import CollectorRegistry, ProcessCollector


@dataclass(frozen=True)
class ProcFigures:
    """One reading; a figure is None where ``/proc`` did not give it (no such process, or
    no ``/proc`` at all)."""

    cpu_seconds: float | None  # user + system
    rss_bytes: float | None
    open_fds: int | None
    threads: int | None
    start_time: float | None  # seconds since the epoch


@cache
def boot_time() -> float:
    """When the machine booted, in seconds since the epoch, to the microsecond.

    A process's start in ``/proc/<pid>/stat`` counts clock ticks since boot on the
    boot-time clock. The kernel's ``btime`` (which the library's collector reads) is whole
    seconds, so a start time built on it could be up to a second early; the two clocks
    read now give the boot to well under a tick.
    """
    if hasattr(time, "CLOCK_BOOTTIME"):
        return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    for line in Path("/proc/stat").read_text().splitlines():  # OSError: no /proc
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


class ProcReader(ProcessCollector):
    """prometheus_client's process collector for ``pid`` ("self" for this process), with
    the boot time to the microsecond, threads, and a typed :meth:`read`.

    Registered on a registry (``registry=``), it gives ``process_cpu_seconds_total``,
    ``process_resident_memory_bytes``, ``process_virtual_memory_bytes``,
    ``process_open_fds``, ``process_max_fds`` and ``process_start_time_seconds``.
    """

    def __init__(
        self,
        pid: int | str = "self",
        registry: CollectorRegistry | None = None,
        proc: str = "/proc",
    ) -> None:
        self._stat_path = Path(proc) / str(pid) / "stat"
        super().__init__(pid=lambda: pid, proc=proc, registry=registry)

    def _boot_time(self) -> float:
        return boot_time()

    def threads(self) -> int | None:
        """The kernel's thread count (field 20 of ``stat``); None without ``/proc``."""
        try:
            # Fields after the command name, which is in parentheses and may hold spaces.
            fields = self._stat_path.read_bytes().rsplit(b")", 1)[1].split()
            return int(fields[17])
        except (OSError, IndexError, ValueError):
            return None

    def read(self) -> ProcFigures:
        """The figures now (the same reads a scrape of ``/metrics`` does)."""
        values = {s.name: s.value for family in self.collect() for s in family.samples}
        fds = values.get("process_open_fds")
        return ProcFigures(
            cpu_seconds=values.get("process_cpu_seconds_total"),
            rss_bytes=values.get("process_resident_memory_bytes"),
            open_fds=None if fds is None else int(fds),
            threads=self.threads(),
            start_time=values.get("process_start_time_seconds"),
        )
