"""Capacity of one Parley replica, and of two behind HAProxy, on this machine.

For each user count (rising), a ``bench.load`` run (N users, K turns each, no barge-ins,
every model at the OpenAI-compatible stub with the same delays) against:

- ``one``: a single replica, directly;
- ``two``: replicas r1 and r2 behind HAProxy with ``deploy/haproxy/haproxy.cfg``
  (``testkit.replicas.Cluster``): signalling through HAProxy, media straight to the replica.

Every step starts fresh processes. Per step: turns answered, server-added latency, each
replica's sessions, CPU (% of one core) and RSS, HAProxy's CPU, the load generator's CPU
(this process: every aiortc client and the stub) and the whole machine's busy CPU (of
100 % per core). A step holds as in ``bench.capacity`` (every turn answered, p95
server-added ≤ the limit). The load generator runs on the same cores as the replicas,
so on a small machine it is what saturates first: read the machine column.

    .venv/bin/python -m bench.scale_capacity --steps 4,8,12,16,20,24 --turns 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.capacity import held
from bench.load import ANSWER, BARGE, QUESTIONS, Utterance, aggregate, run_users, utterance
from testkit.measure import ProcSampler, loop_lag
from testkit.replicas import Cluster, kill_on_signals
from testkit.targets import start_stub

SETUPS = {"one": ("r1",), "two": ("r1", "r2")}


class MachineSampler:
    """The whole machine's busy CPU (every core; 100 % = one core) from /proc/stat."""

    def __init__(self, period: float = 0.5) -> None:
        self.period = period
        self.busy_pct: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="machine-sampler")

    @staticmethod
    def _ticks() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields[:8]) - idle, sum(fields[:8])

    def _run(self) -> None:
        cores = os.cpu_count() or 1
        last_busy, last_total = self._ticks()
        while not self._stop.wait(self.period):
            busy, total = self._ticks()
            if total > last_total:
                self.busy_pct.append(100 * cores * (busy - last_busy) / (total - last_total))
            last_busy, last_total = busy, total

    def start(self) -> MachineSampler:
        self._thread.start()
        return self

    def stop(self) -> float:
        """Stop; the mean busy %."""
        self._stop.set()
        self._thread.join(2)
        return round(sum(self.busy_pct) / max(1, len(self.busy_pct)), 1)


def wait_quiet(below: float, within: float) -> float:
    """The machine's busy % over 3 s, measured again until it is under ``below`` (other
    work on a shared machine has paused) or ``within`` seconds have passed."""
    deadline = time.monotonic() + within
    while True:
        sampler = MachineSampler().start()
        time.sleep(3)
        busy = sampler.stop()
        if busy < below or time.monotonic() > deadline:
            return busy


def replica_settings(args: argparse.Namespace) -> dict[str, str]:
    """As ``testkit.targets.start_target`` sets up Parley for ``bench.load``."""
    return {
        "PARLEY_MAX_SESSIONS": str(max(args.users, 20)),
        "PARLEY_VAD_STOP_SECS": str(args.vad_stop_secs),
        "PARLEY_USER_SPEECH_TIMEOUT": str(args.user_speech_timeout),
        "PARLEY_TURN_END": "fixed",
    }


def run_step(
    setup: str, args: argparse.Namespace, qs: list[Utterance], barge: Utterance, folder: Path
) -> dict[str, Any]:
    """One ``bench.load`` run against ``setup`` with ``args.users`` users; its summary."""
    stub = start_stub(args, ANSWER, "what is two plus two")
    try:
        cluster = Cluster(
            stub, folder / f"{setup}-{args.users}", replica_settings(args),
            replica_ids=SETUPS[setup], balancer=setup != "one",
        )  # fmt: skip
        kill_on_signals(cluster)
        with cluster:
            # What else runs on the machine (other users of the cores), replicas idle.
            background = wait_quiet(args.quiet_below, args.quiet_within)
            samplers = {rid: ProcSampler(r.proc.pid).start()
                        for rid, r in cluster.replicas.items() if r.proc}  # fmt: skip
            if cluster.haproxy is not None:
                samplers["haproxy"] = ProcSampler(cluster.haproxy.proc.pid).start()
            samplers["load_generator"] = ProcSampler(os.getpid()).start()
            machine = MachineSampler().start()
            started = time.monotonic()
            results = asyncio.run(run_users(cluster.url, args, qs, barge))
            run_seconds = time.monotonic() - started
            busy = machine.stop()
            for sampler in samplers.values():
                sampler.stop()
            made = {rid: httpx.get(f"{r.url}/health", timeout=5).json()["sessions_total"]
                    for rid, r in cluster.replicas.items()}  # fmt: skip
            lags = {rid: loop_lag(r.url) for rid, r in cluster.replicas.items()}
    finally:
        stub.stop()
    summary = aggregate(results, args, samplers["r1"])
    summary |= {"setup": setup, "run_seconds": round(run_seconds, 1), "machine_busy_pct": busy,
                "machine_busy_before_pct": background}  # fmt: skip
    summary["processes"] = {
        name: sampler.summary(max(1, made.get(name, args.users)))
        | {"sessions": made.get(name), "event_loop_lag": lags.get(name)}
        for name, sampler in samplers.items()
    }
    return summary


def cells(summary: dict[str, Any], why: str) -> str:
    """One Markdown table row."""
    users, turns = summary["users"], summary["turns"]
    added, v2v, procs = summary["server_added"], summary["voice_to_voice"], summary["processes"]
    replicas = [p for name, p in procs.items() if name.startswith("r")]
    sessions = " / ".join(str(p["sessions"]) for p in replicas)
    cpu = " / ".join(str(p.get("cpu_mean_pct")) for p in replicas)
    rss = " / ".join(str(p.get("rss_max_mb")) for p in replicas)
    lb = procs.get("haproxy", {}).get("cpu_mean_pct", "-")
    gen = procs["load_generator"].get("cpu_mean_pct")
    return (f"| {users} | {v2v.get('n', 0)}/{users * turns} | {added.get('p50_ms')} / "
            f"{added.get('p95_ms')} | {sessions} | {cpu} | {rss} | {lb} | {gen} "
            f"| {summary['machine_busy_before_pct']} / {summary['machine_busy_pct']} "
            f"| {why} |")  # fmt: skip


def capacity(setup: str, args: argparse.Namespace, folder: Path) -> list[dict[str, Any]]:
    """Step through the user counts against ``setup``; print its table; every summary."""
    steps = sorted({int(s) for s in args.steps.split(",") if s.strip()})
    qs = [utterance(folder, f"q{n}", text) for n, text in enumerate(QUESTIONS)]
    barge = utterance(folder, "barge", BARGE)
    rows: list[tuple[dict[str, Any], str]] = []
    for users in steps:
        args.users = users
        summary = run_step(setup, args, qs, barge, folder)
        ok, why = held(summary, args.max_added_ms, no_gaps=False)
        summary["held"] = ok
        rows.append((summary, why))
        print(f"{setup}, {users} users: {why}", flush=True)
        if not ok and not args.keep_going:
            break
    print(f"\n{setup}: {len(SETUPS[setup])} replica(s)\n")
    print("| users | turns answered | server-added p50 / p95 ms | sessions per replica "
          "| replica CPU % | replica RSS MB | HAProxy CPU % | load generator CPU % "
          "| machine busy % before / during | verdict |\n" + "| --- " * 10 + "|")  # fmt: skip
    for summary, why in rows:
        print(cells(summary, why))
    passed = [s for s, _ in rows if s["held"]]
    print(f"\nlargest N that held: {passed[-1]['users'] if passed else 0}")
    if passed:
        print(sizing(passed[-1]))
    return [s for s, _ in rows]


def sizing(summary: dict[str, Any]) -> str:
    """Per-session cost at a step that held: the replicas' CPU and RSS over their sessions."""
    replicas = [p for name, p in summary["processes"].items() if name.startswith("r")]
    users = summary["users"]
    cpu = sum(p["cpu_mean_pct"] for p in replicas)
    start = sum(p["rss_start_mb"] for p in replicas) / len(replicas)
    growth = sum(p["rss_max_mb"] - p["rss_start_mb"] for p in replicas)
    return (f"at {users} users: replicas' CPU {cpu:.1f} % of a core in all, "
            f"{cpu / users:.2f} % per session; RSS {start:.0f} MB per replica at start "
            f"+ {growth / users:.2f} MB per session")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", default="4,8,12,16,20,24", help="user counts, rising")
    parser.add_argument("--setups", default="one,two", help="one, two or both (one,two)")
    parser.add_argument("--turns", type=int, default=2)
    # As bench.capacity: server-added counts the stub's 100 ms STT.
    parser.add_argument("--max-added-ms", type=float, default=300.0)
    parser.add_argument("--keep-going", action="store_true", help="run every step anyway")
    parser.add_argument("--json", type=Path, help="write every step's summary here")
    parser.add_argument("--quiet-below", type=float, default=100.0,
                        help="before each step, wait until the machine's busy %% "
                        "(100 = one core) is under this: other work on it pauses")  # fmt: skip
    parser.add_argument("--quiet-within", type=float, default=0.0,
                        help="seconds to wait for that at most (0: measure once)")  # fmt: skip
    # As bench.load's defaults.
    for name, default in [("stt-delay", 0.1), ("llm-delay", 0.2), ("tts-delay", 0.1),
                          ("tts-seconds-per-char", 0.06), ("vad-stop-secs", 0.2),
                          ("user-speech-timeout", 0.6), ("stagger", 0.25),
                          ("timeout", 300.0)]:  # fmt: skip
        parser.add_argument(f"--{name}", type=float, default=default)
    args = parser.parse_args()
    args.barge_in_every, args.barge_in_delay, args.client_jitter_frames = 0, 0.5, 1
    folder = Path(tempfile.mkdtemp(prefix="parley-scale-capacity-"))
    runs = {setup: capacity(setup, args, folder) for setup in args.setups.split(",")}
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2) + "\n")
    print(f"(logs and JSON in {folder})")
    (folder / "summary.json").write_text(json.dumps(runs, indent=2) + "\n")


if __name__ == "__main__":
    main()
