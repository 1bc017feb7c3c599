"""What the load benches measure on the side: latency statistics, the pacing of received
audio, the server's CPU and RSS (read as the server reads its own), its log's errors, and
an optional py-spy run."""

from __future__ import annotations

import statistics
import subprocess
import threading
import time
import wave
from pathlib import Path
from typing import Any

import httpx

from server.process.proc import ProcReader

FRAME = 0.020
GAP = 0.060


def stats(values: list[float]) -> dict[str, float]:
    """n, p50, p95, max in ms (n only when empty)."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "n": len(ordered),
        "p50_ms": round(1000 * statistics.median(ordered), 1),
        "p95_ms": round(1000 * p95, 1),
        "max_ms": round(1000 * ordered[-1], 1),
    }


def pacing(intervals: list[float]) -> dict[str, float]:
    """Inter-arrival of the bot's frames: median, p95, max |interval - 20 ms|, gaps."""
    if not intervals:
        return {"n": 0}
    ordered = sorted(intervals)
    return {
        "n": len(ordered),
        "median_ms": round(1000 * statistics.median(ordered), 2),
        "p95_ms": round(1000 * ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 2),
        "max_jitter_ms": round(1000 * max(abs(i - FRAME) for i in ordered), 1),
        "gaps_over_60ms": sum(1 for i in ordered if i > GAP),
    }


class ProcSampler:
    """CPU % (of one core) and RSS of a process every ``period`` s, in a thread; read by
    :class:`server.process.proc.ProcReader`, the reader of the server's own figures."""

    def __init__(self, pid: int, period: float = 0.5) -> None:
        self.pid = pid
        self.period = period
        self.cpu: list[float] = []
        self.cpu_seconds = 0.0  # the process's CPU time while sampled
        self.rss_mb: list[float] = []
        self._reader = ProcReader(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="proc-sampler")

    def _sample(self) -> tuple[float, float] | None:
        """CPU seconds and RSS in MB now; None once the process has ended."""
        figures = self._reader.read()
        if figures.cpu_seconds is None or figures.rss_bytes is None:
            return None
        return figures.cpu_seconds, figures.rss_bytes / 2**20

    def _run(self) -> None:
        first = self._sample()
        if first is None:
            return
        (last_cpu, _), last_t = first, time.monotonic()
        while not self._stop.wait(self.period):
            sample, now = self._sample(), time.monotonic()
            if sample is None:
                return
            cpu, rss_mb = sample
            self.cpu.append(100 * (cpu - last_cpu) / (now - last_t))
            self.cpu_seconds += cpu - last_cpu
            self.rss_mb.append(rss_mb)
            last_cpu, last_t = cpu, now

    def start(self) -> ProcSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    def summary(self, users: int) -> dict[str, float]:
        if not self.cpu:
            return {"samples": 0}
        mean_cpu = statistics.fmean(self.cpu)
        max_rss = max(self.rss_mb)
        return {
            "samples": len(self.cpu),
            "cpu_mean_pct": round(mean_cpu, 1),
            "cpu_max_pct": round(max(self.cpu), 1),
            "rss_max_mb": round(max_rss, 1),
            "rss_start_mb": round(self.rss_mb[0], 1),
            "cpu_mean_pct_per_session": round(mean_cpu / users, 1),
            "cpu_seconds": round(self.cpu_seconds, 1),
            "rss_max_mb_per_session": round(max_rss / users, 1),
            "rss_growth_mb_per_session": round((max_rss - self.rss_mb[0]) / users, 1),
        }


def log_problems(log: str) -> dict[str, Any]:
    """Counts and the first lines of errors and warnings in the server's log."""
    lines = log.splitlines()
    bad = [ln for ln in lines if any(w in ln for w in ("ERROR", "Traceback", "CRITICAL"))]
    warn = [ln for ln in lines if "WARNING" in ln]
    return {
        "errors": len(bad),
        "warnings": len(warn),
        "first_errors": bad[:10],
        "first_warnings": warn[:10],
    }


def start_profiler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` (threads included, native frames off) until SIGINT."""
    cmd = ["py-spy", "record", "--pid", str(pid), "--rate", "200", "--format", "speedscope",
           "--output", str(out), "--nonblocking", "--threads"]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def loop_lag(base_url: str) -> dict[str, Any]:
    """The server's event-loop lag from its /metrics histogram: samples, mean, the bucket
    bound under which 95 % fell, and the worst of the last 10 s (Parley only)."""
    try:
        text = httpx.get(f"{base_url}/metrics", timeout=5).text
    except httpx.HTTPError as exc:
        return {"error": str(exc)}
    buckets: list[tuple[float, float]] = []
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("parley_event_loop_lag_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(le), float(line.rsplit(" ", 1)[1])))
        elif line.startswith(("parley_event_loop_lag_seconds_", "parley_event_loop_lag_max")):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    count = values.get("parley_event_loop_lag_seconds_count", 0.0)
    if not count:
        return {"samples": 0}
    p95 = next((le for le, n in buckets if n >= 0.95 * count), float("inf"))
    return {
        "samples": int(count),
        "mean_ms": round(1000 * values["parley_event_loop_lag_seconds_sum"] / count, 2),
        "p95_under_ms": 1000 * p95,
        "recent_max_ms": round(1000 * values.get("parley_event_loop_lag_max_seconds", 0.0), 1),
    }


def speech_seconds(wav: Path) -> float:
    """A WAV file's length in seconds."""
    with wave.open(str(wav)) as src:
        return src.getnframes() / src.getframerate()


def mean_cpu(pid: int, seconds: float) -> float:
    """Mean CPU % of one core used by ``pid`` over ``seconds``."""
    sampler = ProcSampler(pid, period=0.5).start()
    time.sleep(seconds)
    sampler.stop()
    return statistics.fmean(sampler.cpu) if sampler.cpu else 0.0
