"""Hostile clients and call recordings (issue 42, item 8): what recording costs a peer that
never speaks, how big the folder grows, and what serving a large live recording costs.

Starts its own servers on 127.0.0.1 with ``PARLEY_RECORDING=true`` (models never load:
nobody speaks, or the caller's audio is silence), and plays:

- ``idle``: ``--offers`` WebRTC offers that never complete ICE and ``--sockets`` plain
  WebSocket calls (``/ws``) that connect and send nothing. Figures: recording files in
  the folder and the server's threads, before and while they are held.
- ``cap``: a folder already holding ``--old-files`` old recordings of 250 KB each, a
  server with ``PARLEY_RECORDING_MAX_BYTES`` at ``--cap`` bytes, then ``--calls`` calls of
  3 s (a microphone sending silence). Figures: the folder's size at each step (after
  the calls, waited for up to 40 s: the cap is enforced on a timer), the files removed,
  and what ``/health`` says of it.
- ``get``: a live call (connected, silent) whose recording is ``--size-mb`` MB (a sparse
  file at its path: a real one that large is two days of call), fetched ``--gets`` times
  at once with ``GET /api/sessions/{id}/recording``. Figures: bytes served, the server's
  RSS before and at its peak (sampled every 50 ms).

Everything is bounded in count and time and goes to 127.0.0.1 only.

    .venv/bin/python bench/hostile_recordings.py [--only idle,cap,get] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a file from any folder
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.hostile_signalling import bare_offer, run_scenarios, scenario_parser  # noqa: E402
from testkit.server_process import ServerProcess  # noqa: E402
from testkit.socket_callers import PcmCaller  # noqa: E402

SCENARIOS = ("idle", "cap", "get")
MB = 1_000_000


@contextlib.contextmanager
def serving(folder: Path, **settings: str) -> Iterator[ServerProcess]:
    env = {
        "PARLEY_RECORDING": "true",
        "PARLEY_RECORDING_DIR": str(folder),
        "PARLEY_LOG_LEVEL": "INFO",
        "PARLEY_MAX_SESSIONS": "100",
    }
    env |= {f"PARLEY_{k.upper()}": v for k, v in settings.items()}
    server = ServerProcess(env, Path(tempfile.mkdtemp()) / "server.log")
    try:
        yield server
    finally:
        server.stop()


def proc_status(pid: int, field: str) -> int:
    """A figure of ``/proc/<pid>/status`` (kB figures in bytes)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            value = line.split()[1]
            return int(value) * 1024 if line.endswith("kB") else int(value)
    raise KeyError(field)


def folder_figures(folder: Path) -> tuple[int, int]:
    """(files, bytes) of the recordings in ``folder``."""
    sizes = [p.stat().st_size for p in folder.glob("*.ogg")]
    return len(sizes), sum(sizes)


def ws_url(server: ServerProcess) -> str:
    return server.url.replace("http://", "ws://") + "/ws"


@contextlib.asynccontextmanager
async def silent_callers(server: ServerProcess, count: int) -> AsyncIterator[list[PcmCaller]]:
    """``count`` /ws calls that connect and send nothing at all."""
    async with contextlib.AsyncExitStack() as stack:
        callers: list[PcmCaller] = []
        for _ in range(count):
            caller = PcmCaller(ws_url(server))
            await stack.enter_async_context(caller)
            caller.muted = True  # before its microphone task first runs
            callers.append(caller)
        yield callers


async def live_sessions(http: httpx.AsyncClient) -> int:
    return len((await http.get("/api/sessions")).json()["sessions"])


async def idle(args: argparse.Namespace) -> dict[str, Any]:
    sdp = await bare_offer()
    folder = Path(tempfile.mkdtemp()) / "recordings"
    with serving(folder) as server:
        pid = server.proc.pid
        threads_before = proc_status(pid, "Threads")
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
            for _ in range(args.offers):
                answer = await http.post("/api/offer", json={"sdp": sdp, "type": "offer"})
                answer.raise_for_status()
            async with silent_callers(server, args.sockets):
                await asyncio.sleep(2.0)  # what the sessions start has started
                held = await live_sessions(http)
                files, size = folder_figures(folder) if folder.exists() else (0, 0)
                threads = proc_status(pid, "Threads")
    return {
        "sessions held (offers never connected + sockets silent)": held,
        "recording files made": files,
        "their bytes": size,
        "server threads before, while held": f"{threads_before}, {threads}",
    }


def old_recordings(folder: Path, count: int, size: int) -> None:
    """``count`` recordings of ``size`` bytes, a day old and older, oldest first by name."""
    folder.mkdir(parents=True)
    now = time.time()
    for n in range(count):
        path = folder / f"old-{n:03d}.ogg"
        path.write_bytes(b"OggS" + os.urandom(size - 4))
        written = now - 86400 * (2 + count - n) / count  # old-000 the oldest
        os.utime(path, (written, written))


async def a_call(server: ServerProcess, seconds: float) -> None:
    async with PcmCaller(ws_url(server)):  # its microphone sends silence: audio all the same
        await asyncio.sleep(seconds)


async def cap(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp()) / "recordings"
    old_recordings(folder, args.old_files, 250_000)
    rows: dict[str, Any] = {"cap (PARLEY_RECORDING_MAX_BYTES)": args.cap}
    rows["folder before the server: files, bytes"] = "{}, {}".format(*folder_figures(folder))
    with serving(folder, recording_max_bytes=str(args.cap)) as server:
        await asyncio.sleep(1.0)
        rows["after start-up: files, bytes"] = "{}, {}".format(*folder_figures(folder))
        for batch in range(0, args.calls, 10):
            await asyncio.gather(*(a_call(server, 3.0) for _ in range(min(10, args.calls - batch))))
        rows["right after the calls: files, bytes"] = "{}, {}".format(*folder_figures(folder))
        for _ in range(40):  # the cap's next sweep, or 40 s
            if folder_figures(folder)[1] <= args.cap:
                break
            await asyncio.sleep(1.0)
        rows["40 s later at most: files, bytes"] = "{}, {}".format(*folder_figures(folder))
        oldest_left = min((p.name for p in folder.glob("old-*.ogg")), default="none")
        rows["oldest old recording left"] = oldest_left
        async with httpx.AsyncClient(base_url=server.url, timeout=5) as http:
            health = (await http.get("/health")).json()
        rows["/health recordings"] = json.dumps(health.get("recordings"))
        lines = server.log().splitlines()
    rows["log lines about the cap"] = sum("PARLEY_RECORDING_MAX_BYTES" in line for line in lines)
    return rows


class RssPeak:
    """The peak of a process's RSS, sampled every ``period`` s in a thread."""

    def __init__(self, pid: int, period: float = 0.05) -> None:
        self.pid, self.period, self.peak = pid, period, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, proc_status(self.pid, "VmRSS"))
            self._stop.wait(self.period)

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def fetch(http: httpx.AsyncClient, path: str) -> int:
    """Read one answer to the end (chunk by chunk, kept nowhere); its bytes."""
    got = 0
    async with http.stream("GET", path) as answer:
        answer.raise_for_status()
        async for chunk in answer.aiter_raw():
            got += len(chunk)
    return got


async def get(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp()) / "recordings"
    size = args.size_mb * MB
    with serving(folder, recording_max_bytes=str(10 * size)) as server:
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=120) as http,
            silent_callers(server, 1),
        ):
            await asyncio.sleep(0.5)
            (session,) = (await http.get("/api/sessions")).json()["sessions"]
            path = folder / f"{session['pc_id']}.ogg"
            folder.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as file:  # the head of an Ogg file, then a hole
                file.write(b"OggS" + bytes(60))
                file.truncate(size)
            rss_before = proc_status(server.proc.pid, "VmRSS")
            url = f"/api/sessions/{session['pc_id']}/recording"
            started = time.monotonic()
            with RssPeak(server.proc.pid) as rss:
                served = await asyncio.gather(*(fetch(http, url) for _ in range(args.gets)))
            took = time.monotonic() - started
    return {
        "live recording, GETs at once": f"{size // MB} MB, {args.gets}",
        "bytes served per GET": ", ".join(str(n) for n in sorted(set(served))),
        "seconds for all": round(took, 1),
        "server RSS before, peak (MB)": f"{rss_before / MB:.0f}, {rss.peak / MB:.0f}",
        "peak growth (MB)": round((rss.peak - rss_before) / MB),
    }


def main() -> None:
    parser = scenario_parser(__doc__, SCENARIOS)
    parser.add_argument("--offers", type=int, default=30, help="idle: offers never connected")
    parser.add_argument("--sockets", type=int, default=20, help="idle: silent /ws calls")
    parser.add_argument("--old-files", type=int, default=40, help="cap: old recordings, 250 KB")
    parser.add_argument("--cap", type=int, default=4 * MB, help="cap: the folder's cap, bytes")
    parser.add_argument("--calls", type=int, default=20, help="cap: calls of 3 s")
    parser.add_argument("--size-mb", type=int, default=256, help="get: the live recording's MB")
    parser.add_argument("--gets", type=int, default=4, help="get: GETs at once")
    run_scenarios(parser, SCENARIOS, globals())


if __name__ == "__main__":
    main()
