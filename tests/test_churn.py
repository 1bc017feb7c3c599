"""A short churn: sessions ended every way a call can end, then nothing left behind.

The same mix as ``bench/churn.py`` (hang-up, close, vanish, DELETE, restart,
renegotiation, each while the bot speaks), 30 sessions, six at a time, against a real
server whose models are the stub. The server's own figures must come back to the
baseline taken after the warm-up: sessions, asyncio tasks, threads, peer connections
and file descriptors. RSS is only reported here (the bench checks it over 300 sessions).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from bench.churn import KINDS, churn, start_stack

pytestmark = pytest.mark.e2e


async def test_thirty_sessions_leave_nothing_behind(tmp_path: Path) -> None:
    # Liveness 5 s: short enough to reap the vanished peers within the settle time, long
    # enough that six live clients in this (busy) test process are never taken for gone.
    stub, server = start_stack(liveness=5.0, log_dir=tmp_path, seconds_per_char=0.02)
    try:
        async with httpx.AsyncClient() as http:
            process = (await http.get(f"{server.url}/health")).json()["process"]
        assert process["peer_connections"] == 0 and process["open_fds"] > 0
        assert process["rss_bytes"] > 0 and process["threads"] >= 1
        report = await churn(
            server.url,
            sessions=30,
            concurrency=6,
            warmup=6,
            settle=15,
            rss_tolerance=0,
            thread_slack=2,  # the executor (6 threads at most) may still be growing
        )
    finally:
        server.stop()
        stub.stop()
    print(report.table())
    assert report.sessions == 30 and set(report.by_kind) == set(KINDS)
    assert report.failures == [], f"{report.failures}\n{server.log()[-3000:]}"
    assert report.leaks == [], report.table()
    assert report.sessions_left == 0 and report.end["peer_connections"] == 0
    assert report.rss_ratio < 1.5
