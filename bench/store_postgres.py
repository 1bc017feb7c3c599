"""Transcript writes into PostgreSQL: sustained recorded events/s with 20 calls (the goal
is 5,000/s or more, as SQLite), how long the writes held the event loop, and peak memory.

The same flood as ``bench.transcript_writes`` (sessions on one event loop record events
and a turn every tenth write, yielding every ``--yield-every`` writes; the clock stops
when a read has come back, i.e. once every write was committed), into a real PostgreSQL
15 started on 127.0.0.1 in a temporary folder (``testkit.postgres_server``, ``fsync`` on,
as a server keeps it). ``--replicas 2`` floods from two stores at once (two replicas
sharing the database; the rate is of both together).

    .venv/bin/python -m bench.store_postgres --events 100000
    .venv/bin/python -m bench.store_postgres --events 100000 --replicas 2

With ``--url`` it uses that database instead (its ``sessions`` and ``entries`` grow).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import psycopg

from bench.transcript_writes import flood, proc_status_kib
from server.storage.postgres import PostgresTranscriptStore
from testkit.postgres_server import PostgresServer


class _Prefixed:
    """A store whose session ids carry a replica's prefix (the flood names them pcN)."""

    def __init__(self, store: PostgresTranscriptStore) -> None:
        self.store = store
        self.prefix = f"{store.replica}."

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)
        return lambda session_id, *a, **k: method(self.prefix + session_id, *a, **k)


async def run_with(url: str, args: argparse.Namespace) -> dict[str, Any]:
    stores = [
        PostgresTranscriptStore(url, replica=f"r{n + 1}", max_queue=args.max_queue)
        for n in range(args.replicas)
    ]
    for store in stores:
        await store.start()
    rss_before = proc_status_kib("VmRSS")
    started = time.perf_counter()
    try:
        runs = await asyncio.gather(
            *(flood(_Prefixed(s), args.events, args.sessions, args.yield_every) for s in stores)
        )
        elapsed = time.perf_counter() - started
        statuses = [s.status() for s in stores]
    finally:
        for store in stores:
            await store.close()
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT COUNT(*) FROM entries").fetchone()
    hold = [r["loop_hold_ms"] for r in runs]
    return {
        "replicas": args.replicas,
        "events": args.events * args.replicas,
        "sessions": args.sessions * args.replicas,
        "total_seconds": round(elapsed, 3),
        "recorded_per_second": round(args.events * args.replicas / elapsed),
        "per_replica": [r["recorded_per_second"] for r in runs],
        "loop_hold_ms": {k: max(h[k] for h in hold) for k in ("median", "p99", "max")},
        "rss_peak_growth_mib": round((proc_status_kib("VmHWM") - rss_before) / 1024, 1),
        "recorded_entries": row[0] if row else 0,
        "status": [
            {k: s[k] for k in ("commits", "retries", "failed_writes", "dropped_writes", "queue")}
            for s in statuses
        ],
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.url:
        return await run_with(args.url, args)
    server = PostgresServer().start()
    try:
        figures = await run_with(server.create_database("bench"), args)
    finally:
        server.remove()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="per replica")
    parser.add_argument("--sessions", type=int, default=20, help="calls per replica")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--yield-every", type=int, default=50, help="writes between yields")
    parser.add_argument("--max-queue", type=int, default=1_000_000, help="the write queue's bound")
    parser.add_argument("--url", help="a database to use instead of a throwaway cluster")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = asyncio.run(run(args))
    if args.json:
        json.dump(figures, sys.stdout, indent=2)
        print()
    else:
        for key, value in figures.items():
            print(f"{key:>22}: {value}")
    expected = args.events * args.replicas
    if not args.url and figures["recorded_entries"] != expected:
        raise SystemExit(f"lost writes: {figures['recorded_entries']} of {expected} recorded")


if __name__ == "__main__":
    main()
