"""Churn: hundreds of short sessions ended every way a call can end, then a leak check.

Starts the OpenAI-compatible stub and a Parley server (every model at the stub, a short
liveness timeout) and runs ``--sessions`` aiortc clients, ``--concurrency`` at a time.
Each connects, asks a typed question and, while the bot answers, ends in one of:

- ``hangup``: RTVI ``disconnect-bot`` (the server says ``peerLeft`` and closes);
- ``close``: waits for the answer to finish, then closes its peer connection;
- ``vanish``: stops sending anything and drops its sockets (a crashed browser): only
  the server's liveness timeout can reap it;
- ``delete``: ``DELETE /api/sessions/{pc_id}``;
- ``restart``: a new peer connection takes the session over (``restart_pc``);
- ``renegotiate``: a new offer on the same peer connection, then the answer ends.

The server's own figures (``/health``: sessions, and under ``process`` asyncio tasks,
file descriptors, threads, peer connections, RSS) are read once quiet after the first
``--warmup`` sessions (the baseline: lazily made thread pools and caches exist by then)
and once quiet at the end. Leak checks: no session left, no open peer connection,
tasks, threads and peer-connection objects back to the baseline, file descriptors too
(within the model clients' keep-alive pool), RSS at the end within ``--rss-tolerance``
of the baseline. Prints a table (``--json`` for JSON); exits 1 when a check fails.

    .venv/bin/python -m bench.churn --sessions 300 --concurrency 6
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

KINDS = ("hangup", "close", "vanish", "delete", "restart", "renegotiate")
STEP_TIMEOUT = 15.0  # seconds any one step of a session may take
IDLE_SETTLE = 1.5  # seconds idle before figures count (the server collects at 0.5 s)


def is_type(name: str) -> Any:
    return lambda m: m.get("type") == name


def left(m: dict[str, Any]) -> bool:
    return m.get("type") == "signalling" and m.get("message", {}).get("type") == "peerLeft"


async def _answering(client: RTCTestClient) -> None:
    """Ask a question and return once the bot is speaking its answer."""
    client.send_rtvi("send-text", {"content": "Tell me something."})
    await client.wait_for(is_type("bot-started-speaking"), within=STEP_TIMEOUT)


async def run_session(base_url: str, kind: str, http: httpx.AsyncClient) -> None:
    """One session that ends as ``kind`` says; raises when a step fails."""
    client = RTCTestClient(base_url)
    spare: RTCTestClient | None = None
    try:
        await client.connect()
        await _answering(client)
        if kind == "hangup":
            client.send_rtvi("disconnect-bot")
            await client.wait_for(left, within=STEP_TIMEOUT)
        elif kind == "close":
            await client.wait_for(is_type("bot-stopped-speaking"), within=STEP_TIMEOUT)
        elif kind == "vanish":
            client.vanish()
        elif kind == "delete":
            answer = await http.delete(f"/api/sessions/{client.pc_id}")
            answer.raise_for_status()
        elif kind == "restart":
            spare = RTCTestClient(base_url)
            spare.pc_id = client.pc_id
            await spare.connect(restart_pc=True)
            await client.wait_for(left, within=STEP_TIMEOUT)
            await _answering(spare)
        elif kind == "renegotiate":
            await client.renegotiate()
            await client.wait_for(is_type("bot-stopped-speaking"), within=STEP_TIMEOUT)
        else:
            raise ValueError(f"unknown kind {kind!r}")
    except TimeoutError as exc:
        seen = [t for t in client.types() if t != "metrics"][-8:]
        raise TimeoutError(f"session {client.pc_id}: {exc.args[0][:40]}...; last {seen}") from None
    finally:
        for c in (client, spare):
            if c is not None:
                await c.close()


async def health(http: httpx.AsyncClient) -> dict[str, Any]:
    answer = await http.get("/health")
    answer.raise_for_status()
    return answer.json()


async def quiet(
    http: httpx.AsyncClient, within: float, target: dict[str, int] | None = None
) -> dict[str, Any]:
    """``/health`` once no session and no open peer connection is left, the server has
    had a moment to collect the garbage of the last ones (it does when it goes idle)
    and, given a ``target``, the process figures are back to it; or at ``within`` s."""
    deadline = time.monotonic() + within
    idle_since: float | None = None
    while True:
        figures = await health(http)
        process = figures["process"]
        idle = figures["sessions_active"] == 0 and process["peer_connections_open"] == 0
        idle_since = (idle_since or time.monotonic()) if idle else None
        done = idle_since is not None and time.monotonic() - idle_since >= IDLE_SETTLE
        if done and target is not None:
            done = all(process[k] <= v for k, v in target.items())
        if done or time.monotonic() > deadline:
            return figures
        await asyncio.sleep(0.25)


@dataclass
class ChurnReport:
    sessions: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    start: dict[str, Any] = field(default_factory=dict)  # process figures before any
    baseline: dict[str, Any] = field(default_factory=dict)  # quiet after the warm-up
    end: dict[str, Any] = field(default_factory=dict)  # quiet after all
    sessions_left: int = 0
    leaks: list[str] = field(default_factory=list)

    @property
    def rss_ratio(self) -> float:
        return self.end["rss_bytes"] / self.baseline["rss_bytes"]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["by_kind"] = dict(self.by_kind)
        out["rss_ratio"] = round(self.rss_ratio, 4)
        return out

    def table(self) -> str:
        mib = 1 / 2**20
        rows = [
            ("sessions run", self.sessions, "", ""),
            ("by kind", ", ".join(f"{k} {n}" for k, n in sorted(self.by_kind.items())), "", ""),
            ("failed sessions", len(self.failures), "", ""),
            ("duration (s)", f"{self.seconds:.1f}", "", ""),
            ("", "start", "baseline", "end"),
        ]
        for key in ("asyncio_tasks", "open_fds", "threads", "peer_connections"):
            rows.append((key, self.start[key], self.baseline[key], self.end[key]))
        rss = [f"{d['rss_bytes'] * mib:.1f}" for d in (self.start, self.baseline, self.end)]
        rows.append(("RSS (MiB)", *rss))
        rows.append(("RSS end / baseline", f"{self.rss_ratio:.3f}", "", ""))
        rows.append(("sessions left", self.sessions_left, "", ""))
        rows.append(
            ("leak checks", "FAILED: " + "; ".join(self.leaks) if self.leaks else "ok", "", "")
        )
        width = max(len(str(r[0])) for r in rows)
        return "\n".join(
            f"{a!s:<{width}}  {b!s:>10}  {c!s:>10}  {d!s:>10}".rstrip() for a, b, c, d in rows
        )


def leak_checks(
    report: ChurnReport, fd_slack: int, rss_tolerance: float, thread_slack: int = 0
) -> list[str]:
    """What did not come back to the baseline."""
    base, end = report.baseline, report.end
    leaks = []
    if report.sessions_left:
        leaks.append(f"{report.sessions_left} sessions left")
    if end["peer_connections_open"]:
        leaks.append(f"{end['peer_connections_open']} peer connections still open")
    for key, slack in (
        ("asyncio_tasks", 0),
        ("threads", thread_slack),
        ("peer_connections", 0),
        ("open_fds", fd_slack),
    ):
        if end[key] > base[key] + slack:
            leaks.append(f"{key} {base[key]} -> {end[key]}")
    if rss_tolerance and report.rss_ratio > 1 + rss_tolerance:
        leaks.append(f"RSS grew {100 * (report.rss_ratio - 1):.1f} % after the warm-up")
    return leaks


async def churn(
    base_url: str,
    sessions: int,
    concurrency: int,
    warmup: int = 30,
    time_limit: float = 900.0,
    settle: float = 20.0,
    rss_tolerance: float = 0.10,
    thread_slack: int = 0,
) -> ChurnReport:
    """Run the sessions (kinds in turn) and check for leaks; see the module docstring.
    ``thread_slack``: threads the end may have over the baseline, for short runs whose
    warm-up may not have grown the event loop's executor (aiortc encodes audio in it)
    to its cap yet."""
    report = ChurnReport()
    kinds = itertools.cycle(KINDS)
    started = time.monotonic()
    # Idle connections expire before uvicorn's 5 s keep-alive closes them: a request
    # must never be sent on a connection the server is closing.
    limits = httpx.Limits(keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=base_url, timeout=STEP_TIMEOUT, limits=limits) as http:
        report.start = (await health(http))["process"]

        async def batch(count: int) -> None:
            queue: asyncio.Queue[str] = asyncio.Queue()
            for _ in range(count):
                queue.put_nowait(next(kinds))

            async def worker() -> None:
                while not queue.empty() and time.monotonic() - started < time_limit:
                    kind = queue.get_nowait()
                    try:
                        async with asyncio.timeout(4 * STEP_TIMEOUT):
                            await run_session(base_url, kind, http)
                    except Exception as exc:
                        report.failures.append(f"{kind}: {type(exc).__name__}: {exc}"[:300])
                    report.sessions += 1
                    report.by_kind[kind] += 1

            await asyncio.gather(*(worker() for _ in range(concurrency)))

        await batch(min(warmup, sessions))
        report.baseline = (await quiet(http, settle))["process"]
        await batch(sessions - report.sessions)
        # Threads too: Starlette's worker threads come and go (idle ones exit in 10 s).
        checked = ("asyncio_tasks", "peer_connections", "threads")
        target = {k: report.baseline[k] for k in checked}
        target["threads"] += thread_slack
        final = await quiet(http, settle, target)
        report.end = final["process"]
        report.sessions_left = final["sessions_active"]
    report.seconds = time.monotonic() - started
    fd_slack = 3 * concurrency + 2  # idle keep-alive connections to the three models
    report.leaks = leak_checks(report, fd_slack, rss_tolerance, thread_slack)
    return report


def start_stack(
    liveness: float, log_dir: Path, seconds_per_char: float = 0.04
) -> tuple[OpenAIStub, ServerProcess]:
    """The stub (its answer spoken for 38 times ``seconds_per_char`` seconds) and a server
    with every model at it."""
    stub = OpenAIStub().start()
    stub.config.tts_seconds_per_char = seconds_per_char
    env = {
        "PARLEY_LLM": "openai",
        "PARLEY_STT": "openai",
        "PARLEY_TTS": "openai",
        "PARLEY_OPENAI_BASE_URL": stub.base_url,
        "PARLEY_OPENAI_API_KEY": stub.api_key,
        "PARLEY_LIVENESS_TIMEOUT": str(liveness),
        "PARLEY_MAX_SESSIONS": "100",
        "PARLEY_LOG_LEVEL": "INFO",
    }
    try:
        server = ServerProcess(env, log_dir / "server.log")
    except Exception:
        stub.stop()
        raise
    return stub, server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=30, help="sessions before the baseline")
    parser.add_argument("--time-limit", type=float, default=900, help="seconds; then stop")
    parser.add_argument("--liveness", type=float, default=4.0, help="server liveness timeout")
    parser.add_argument("--rss-tolerance", type=float, default=0.10)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--log-dir", type=Path, help="keep the server's log there")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        log_dir = args.log_dir or Path(folder)
        log_dir.mkdir(parents=True, exist_ok=True)
        stub, server = start_stack(args.liveness, log_dir)
        try:
            report = asyncio.run(
                churn(
                    server.url,
                    args.sessions,
                    args.concurrency,
                    warmup=args.warmup,
                    time_limit=args.time_limit,
                    settle=args.liveness + 20,
                    rss_tolerance=args.rss_tolerance,
                )
            )
        finally:
            server.stop()
            stub.stop()
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.table())
    for failure in report.failures[:10]:
        print("failed:", failure, file=sys.stderr)
    too_many_failures = len(report.failures) > max(1, report.sessions // 20)
    return 1 if report.leaks or too_many_failures else 0


if __name__ == "__main__":
    sys.exit(main())
