"""How many concurrent conversations one machine holds in real time.

Runs ``bench.load`` with more and more users (each run in its own process, bounded in
time) until p95 server-added latency passes a limit or outbound audio shows gaps, and
reports the largest N that held, with every step's figures.

    .venv/bin/python -m bench.capacity --steps 1,2,4,6,8,10 --max-added-ms 50
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_load(users: int, turns: int, folder: Path) -> dict[str, Any]:
    """One ``bench.load`` run; its JSON summary."""
    out = folder / f"load-{users}.json"
    cmd = [sys.executable, "-m", "bench.load", "--users", str(users), "--turns", str(turns),
           "--barge-in-every", "0", "--json", str(out)]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=600, capture_output=True)
    return json.loads(out.read_text())


def held(summary: dict[str, Any], max_added_ms: float) -> tuple[bool, str]:
    """Whether a run stayed real-time, and why not."""
    added = summary["server_added"].get("p95_ms", float("inf"))
    gaps = summary["pacing"].get("gaps_over_60ms", 0)
    errors = summary.get("user_errors", [])
    if errors:
        return False, f"{len(errors)} user errors"
    if gaps:
        return False, f"{gaps} audio gaps"
    if added > max_added_ms:
        return False, f"p95 server-added {added:.0f} ms > {max_added_ms:.0f} ms"
    return True, "held"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", default="1,2,4,6,8,10", help="user counts to try, rising")
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--max-added-ms", type=float, default=50.0)
    parser.add_argument("--keep-going", action="store_true", help="run every step anyway")
    args = parser.parse_args()
    steps = sorted({int(s) for s in args.steps.split(",") if s.strip()})
    folder = Path(tempfile.mkdtemp(prefix="parley-capacity-"))
    rows: list[tuple[int, dict[str, Any], bool, str]] = []
    largest = 0
    for users in steps:
        summary = run_load(users, args.turns, folder)
        ok, why = held(summary, args.max_added_ms)
        rows.append((users, summary, ok, why))
        if ok:
            largest = users
        elif not args.keep_going:
            break
    print("| users | server-added p50 / p95 ms | voice-to-voice p50 ms | CPU mean % | RSS MB "
          "| gaps | verdict |\n| --- | --- | --- | --- | --- | --- | --- |")  # fmt: skip
    for users, summary, _, why in rows:
        added, v2v = summary["server_added"], summary["voice_to_voice"]
        server = summary["server"]
        print(f"| {users} | {added.get('p50_ms')} / {added.get('p95_ms')} | {v2v.get('p50_ms')} "
              f"| {server.get('cpu_mean_pct')} | {server.get('rss_max_mb')} "
              f"| {summary['pacing'].get('gaps_over_60ms')} | {why} |")  # fmt: skip
    print(f"\nlargest N that held: {largest} (limit: p95 server-added ≤ {args.max_added_ms} ms, "
          "no gaps, no errors)")  # fmt: skip


if __name__ == "__main__":
    main()
