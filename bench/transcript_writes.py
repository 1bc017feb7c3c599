"""Transcript writes under a flood: sustained recorded events/s and peak memory.

Sessions on one event loop record events (and a turn every tenth write) as fast as they
can, yielding to the loop every ``--yield-every`` writes as event handlers would. The
clock stops when a read has come back (a read runs after every write made before it:
the writes have been committed), so the rate is of
*recorded* events, not of queued ones. Memory: the peak RSS growth over the run
(``VmHWM`` minus ``VmRSS`` before it, from ``/proc/self/status``) and, with
``--tracemalloc``, the Python heap's peak (slower: every allocation is traced).

    .venv/bin/python -m bench.transcript_writes --events 100000
    # the same flood against another version of the store, e.g. a copy of the old one
    .venv/bin/python -m bench.transcript_writes --events 5000 --store /tmp/sqlite_store_orig.py

Everything lives in a temporary directory that is removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sqlite3
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

T0 = 1_700_000_000.0


def load_store_class(path: str | None) -> type:
    """``SQLiteTranscriptStore`` from the project, or from the module file at ``path``."""
    if path is None:
        from server.storage.sqlite import SQLiteTranscriptStore

        return SQLiteTranscriptStore
    spec = importlib.util.spec_from_file_location("bench_store_under_test", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load a module from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SQLiteTranscriptStore


def proc_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


async def flood(store: Any, events: int, sessions: int, yield_every: int) -> dict[str, Any]:
    for n in range(sessions):
        store.open_session(f"pc{n}", None, {"remote_addr": "127.0.0.1"}, T0)
    await store.get("pc0")  # the sessions exist before the clock starts
    loop_stalls: list[float] = []
    started = time.perf_counter()
    last_yield = started
    for i in range(events):
        session = f"pc{i % sessions}"
        if i % 10 == 9:
            store.append_turn(session, "user", f"turn {i}", T0 + i * 1e-3)
        else:
            data = {"error": f"bad message {i}", "type": "rtvi-error"}
            store.append_event(session, "rtvi-error", data, T0 + i * 1e-3)
        if i % yield_every == yield_every - 1:
            now = time.perf_counter()
            loop_stalls.append(now - last_yield)  # time the loop was held by these writes
            await asyncio.sleep(0)
            last_yield = time.perf_counter()
    submitted = time.perf_counter()
    await store.get("pc0")  # runs after every write above
    finished = time.perf_counter()
    stalls = sorted(loop_stalls) or [0.0]
    return {
        "submit_seconds": round(submitted - started, 3),
        "total_seconds": round(finished - started, 3),
        "recorded_per_second": round(events / (finished - started)),
        "loop_hold_ms": {
            "median": round(statistics.median(stalls) * 1e3, 3),
            "p99": round(stalls[int(0.99 * (len(stalls) - 1))] * 1e3, 3),
            "max": round(stalls[-1] * 1e3, 3),
        },
    }


def count_entries(path: Path) -> int:
    with sqlite3.connect(path) as db:
        count = db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
    db.close()
    return count


async def run(args: argparse.Namespace) -> dict[str, Any]:
    store_class = load_store_class(args.store)
    with tempfile.TemporaryDirectory(prefix="parley-bench-") as data_dir:
        store = store_class(Path(data_dir))
        await store.start()
        if args.tracemalloc:
            tracemalloc.start()
        rss_before = proc_status_kib("VmRSS")
        try:
            figures = await flood(store, args.events, args.sessions, args.yield_every)
            status = store.status()
        finally:
            await store.close()
        figures["rss_peak_growth_mib"] = round((proc_status_kib("VmHWM") - rss_before) / 1024, 1)
        if args.tracemalloc:
            figures["python_heap_peak_mib"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
            tracemalloc.stop()
        figures["recorded_entries"] = count_entries(Path(data_dir) / "transcripts.db")
    figures.update(events=args.events, sessions=args.sessions, store=args.store or "current")
    figures["status"] = {k: v for k, v in status.items() if k not in ("path", "backend")}
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--yield-every", type=int, default=50, help="writes between yields")
    parser.add_argument("--store", help="a sqlite_store.py to measure instead of the project's")
    parser.add_argument("--tracemalloc", action="store_true", help="also the Python heap peak")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = asyncio.run(run(args))
    if args.json:
        json.dump(figures, sys.stdout, indent=2)
        print()
        return
    for key, value in figures.items():
        print(f"{key:>22}: {value}")
    if figures["recorded_entries"] != args.events:
        raise SystemExit(f"lost writes: {figures['recorded_entries']} of {args.events} recorded")


if __name__ == "__main__":
    main()
