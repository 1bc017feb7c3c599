"""Idle: the CPU an open but silent call costs the server.

Connects N aiortc clients whose microphones send silence (real Opus packets, as a
muted-but-open browser mic does) and samples the server's CPU for a while; then
closes them. The baseline (no sessions) is sampled first and subtracted.

    .venv/bin/python -m bench.idle --users 10 --seconds 20 --target both
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from testkit.measure import mean_cpu
from testkit.rtc_client import RTCTestClient
from testkit.targets import start_stub, start_target


async def hold_sessions(url: str, users: int, pid: int, seconds: float) -> dict[str, float]:
    clients = [RTCTestClient(url, jitter_frames=1) for _ in range(users)]
    try:
        for client in clients:
            await client.connect()
        await asyncio.sleep(2.0)  # past connection set-up
        loop = asyncio.get_running_loop()
        cpu = await loop.run_in_executor(None, mean_cpu, pid, seconds)
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    return {"cpu_pct": round(cpu, 2)}


def run(target: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    stub = start_stub(args, "Hello.", "hello")
    server = start_target(target, args, stub, folder / f"{target}.log")
    try:
        time.sleep(1.0)
        baseline = mean_cpu(server.proc.pid, min(5.0, args.seconds))
        held = asyncio.run(hold_sessions(server.url, args.users, server.proc.pid, args.seconds))
    finally:
        server.stop()
        stub.stop()
    per_session = (held["cpu_pct"] - baseline) / args.users
    return {
        "target": target,
        "users": args.users,
        "seconds": args.seconds,
        "baseline_cpu_pct": round(baseline, 2),
        "cpu_pct": held["cpu_pct"],
        "cpu_pct_per_idle_session": round(per_session, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--target", choices=("parley", "pipecat", "both"), default="parley")
    args = parser.parse_args()
    if not 1 <= args.users <= 50 or not 1 <= args.seconds <= 300:
        parser.error("--users within 1..50, --seconds within 1..300")
    # What start_stub / start_target read; the stub is never asked anything here.
    args.stt_delay = args.llm_delay = args.tts_delay = 0.0
    args.tts_seconds_per_char = 0.06
    args.vad_stop_secs, args.user_speech_timeout = 0.2, 0.6
    folder = Path(tempfile.mkdtemp(prefix="parley-idle-"))
    targets = ("parley", "pipecat") if args.target == "both" else (args.target,)
    results = [run(target, args, folder) for target in targets]
    print(json.dumps(results, indent=2))
    print()
    print("| target | sessions | baseline CPU % | CPU % | CPU % per idle session |")
    print("| --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['target']} | {r['users']} | {r['baseline_cpu_pct']} | {r['cpu_pct']} "
              f"| {r['cpu_pct_per_idle_session']} |")  # fmt: skip


if __name__ == "__main__":
    main()
