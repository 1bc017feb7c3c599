"""Connect time: offer POST → ``bot-ready``, for N sequential and M concurrent clients.

Starts its own server on 127.0.0.1 unless ``--url`` is given, connects with the aiortc
test client (trickled candidates, like the browser), prints median / p95 / max, and
hangs up each client.

    .venv/bin/python -m bench.connect --count 30 --concurrency 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from pathlib import Path

from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered) * 1000, 1),
        "p95_ms": round(p95 * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


async def connect_once(url: str) -> float:
    client = RTCTestClient(url)
    try:
        return await client.connect()
    finally:
        await client.close()


async def run(url: str, count: int, concurrency: int) -> dict[str, dict[str, float]]:
    sequential = [await connect_once(url) for _ in range(count)]
    concurrent: list[float] = []
    for _ in range(max(1, count // concurrency)):
        concurrent += await asyncio.gather(*(connect_once(url) for _ in range(concurrency)))
    return {
        "sequential": summary(sequential),
        f"concurrent_{concurrency}": summary(concurrent),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="a running server; default: start one")
    parser.add_argument("--count", type=int, default=30)
    parser.add_argument("--concurrency", type=int, default=5)
    args = parser.parse_args()
    server = None
    if args.url is None:
        log = Path(tempfile.mkdtemp()) / "server.log"
        server = ServerProcess({"PARLEY_LOG_LEVEL": "WARNING"}, log)
    try:
        results = asyncio.run(run(args.url or server.url, args.count, args.concurrency))
    finally:
        if server is not None:
            server.stop()
    print(json.dumps(results, indent=2))
    print("\n| run | n | median ms | p95 ms | max ms |\n| --- | --- | --- | --- | --- |")
    for name, row in results.items():
        print(f"| {name} | {row['n']} | {row['median_ms']} | {row['p95_ms']} | {row['max_ms']} |")


if __name__ == "__main__":
    main()
