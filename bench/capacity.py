"""How many concurrent conversations one machine holds in real time.

Runs ``bench.load`` with more and more users (each run in its own process, bounded in
time) until a turn goes unanswered or p95 server-added latency passes a limit (and, with
``--no-gaps``, until outbound audio shows gaps at the client), and reports the largest N
that held, with every step's figures. ``--target both`` does it for Parley and then for
the Pipecat bot, and prints the ratio of the two capacities.

    .venv/bin/python -m bench.capacity --steps 1,2,4,6,8,10 --target both
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


def run_load(target: str, users: int, turns: int, folder: Path) -> dict[str, Any]:
    """One ``bench.load`` run; its JSON summary."""
    out = folder / f"{target}-{users}.json"
    load = Path(__file__).with_name("load.py")
    cmd = [sys.executable, str(load), "--users", str(users), "--turns", str(turns),
           "--barge-in-every", "0", "--target", target, "--json", str(out)]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=600, capture_output=True)
    return json.loads(out.read_text())


def held(summary: dict[str, Any], max_added_ms: float, no_gaps: bool) -> tuple[bool, str]:
    """Whether a run stayed real-time, and why not."""
    added = summary["server_added"].get("p95_ms", float("inf"))
    gaps = summary["pacing"].get("gaps_over_60ms", 0)
    errors = summary.get("user_errors", [])
    answered = summary["voice_to_voice"].get("n", 0)
    expected = summary["users"] * summary["turns"]
    if errors or answered < expected:
        return False, f"{answered}/{expected} turns answered, {len(errors)} user errors"
    if no_gaps and gaps:
        return False, f"{gaps} audio gaps"
    if added > max_added_ms:
        return False, f"p95 server-added {added:.0f} ms > {max_added_ms:.0f} ms"
    return True, "held"


def capacity(target: str, args: argparse.Namespace, folder: Path) -> int:
    """Step through the user counts against ``target``; print the table; the largest N."""
    steps = sorted({int(s) for s in args.steps.split(",") if s.strip()})
    rows: list[tuple[int, dict[str, Any], str]] = []
    largest = 0
    for users in steps:
        summary = run_load(target, users, args.turns, folder)
        ok, why = held(summary, args.max_added_ms, args.no_gaps)
        rows.append((users, summary, why))
        if ok:
            largest = users
        elif not args.keep_going:
            break
    print(f"\n{target}\n")
    print("| users | turns answered | server-added p50 / p95 ms | voice-to-voice p50 ms "
          "| CPU mean % | RSS MB | gaps | verdict |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- |")  # fmt: skip
    for users, summary, why in rows:
        added, v2v = summary["server_added"], summary["voice_to_voice"]
        server = summary["server"]
        print(f"| {users} | {v2v.get('n', 0)}/{users * args.turns} "
              f"| {added.get('p50_ms')} / {added.get('p95_ms')} | {v2v.get('p50_ms')} "
              f"| {server.get('cpu_mean_pct')} | {server.get('rss_max_mb')} "
              f"| {summary['pacing'].get('gaps_over_60ms')} | {why} |")  # fmt: skip
    gaps = "no gaps, " if args.no_gaps else ""
    print(f"\nlargest N that held: {largest} (every turn answered, {gaps}"
          f"p95 server-added ≤ {args.max_added_ms} ms)")  # fmt: skip
    return largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", default="1,2,4,6,8,10", help="user counts to try, rising")
    parser.add_argument("--turns", type=int, default=2)
    # 300 ms: server-added counts the stub's 100 ms STT (bench/README.md).
    parser.add_argument("--max-added-ms", type=float, default=300.0)
    parser.add_argument("--no-gaps", action="store_true", help="a gap over 60 ms also fails")
    parser.add_argument("--keep-going", action="store_true", help="run every step anyway")
    parser.add_argument("--target", choices=("parley", "pipecat", "both"), default="parley")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="parley-capacity-"))
    targets = ("parley", "pipecat") if args.target == "both" else (args.target,)
    found = {target: capacity(target, args, folder) for target in targets}
    if len(found) == 2:
        ratio = found["parley"] / found["pipecat"] if found["pipecat"] else float("inf")
        print(f"\ncapacity Parley / Pipecat: {found['parley']} / {found['pipecat']} = {ratio:.1f}")
    print(f"(JSON of every run in {folder})")


if __name__ == "__main__":
    main()
