"""The SQLite store's writer under load: group commits that stay durable, a bounded
queue whose producers wait (and never lose a write), and failures isolated per write."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from server.storage.sqlite import SQLiteTranscriptStore

T0 = 1_700_000_000.0


@pytest.fixture
async def small(tmp_path: Path) -> AsyncIterator[SQLiteTranscriptStore]:
    """A store with a small queue and small batches, so a flood fills them quickly."""
    opened = SQLiteTranscriptStore(tmp_path, max_queue=64, max_batch=32)
    await opened.start()
    yield opened
    await opened.close()


def committed_texts(path: Path, session_id: str) -> list[str]:
    """What another connection sees: committed rows only."""
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT text FROM entries WHERE session_id = ? AND kind = 'turn' ORDER BY seq",
            (session_id,),
        ).fetchall()
    db.close()
    return [row[0] for row in rows]


def count_entries(path: Path) -> int:
    with sqlite3.connect(path) as db:
        count = db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
    db.close()
    return count


async def test_what_was_recorded_before_close_is_there_after_reopening(tmp_path: Path) -> None:
    first = SQLiteTranscriptStore(tmp_path)
    await first.start()
    first.open_session("pc", None, {}, T0)
    for i in range(500):
        first.append_event("pc", "tool-call", {"i": i}, T0 + i)
    first.append_turn("pc", "user", "last words", T0 + 600)
    await first.close()  # no read in between: close itself must flush
    second = SQLiteTranscriptStore(tmp_path)
    await second.start()
    try:
        record = await second.get("pc")
        assert record is not None
        assert [e.data["i"] for e in record.events] == list(range(500))
        assert [t.text for t in record.turns] == ["last words"]
    finally:
        await second.close()


async def test_a_completed_turn_is_committed_while_a_flood_goes_on(
    small: SQLiteTranscriptStore,
) -> None:
    """The turn is visible to another connection (committed) while the writes go on."""
    small.open_session("pc", None, {}, T0)
    await small.get("pc")
    stop = threading.Event()
    produced = 0

    def flood() -> None:  # a thread: nothing gives the writer a break to catch up
        nonlocal produced
        while not stop.is_set() and produced < 300_000:
            if produced == 500:
                small.append_turn("pc", "user", "durable now", T0 + 1)
            small.append_event("pc", "rtvi-error", {"n": produced}, T0)
            produced += 1

    flooding = asyncio.create_task(asyncio.to_thread(flood))
    deadline = time.monotonic() + 30
    while "durable now" not in await asyncio.to_thread(committed_texts, small.path, "pc"):
        assert time.monotonic() < deadline, "the turn was never committed"
        await asyncio.sleep(0.01)
    still_flooding = not flooding.done()
    stop.set()
    await flooding
    assert still_flooding, "committed only once the flood was over, not as the turn completed"
    assert small.status()["queue"]["waits"] > 0, "the flood filled the queue"


async def test_a_backlog_is_committed_in_bounded_groups(tmp_path: Path) -> None:
    """A turn behind a backlog waits for at most one group of ``max_batch`` writes, not
    for the queue to drain: with 200 writes waiting, 16 per group is at least 12 commits."""
    store = SQLiteTranscriptStore(tmp_path, max_queue=256, max_batch=16)  # no producer wait
    await store.start()
    try:
        store.open_session("pc", None, {}, T0)
        await store.get("pc")
        commits_before = store.status()["commits"]
        other = sqlite3.connect(store.path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # the writer's next transaction waits for this one
        try:
            for i in range(200):
                store.append_turn("pc", "user", f"t{i}", T0 + i)
            await asyncio.sleep(0.1)  # the writer has taken the first write and waits
            assert store.status()["pending_writes"] == 200
        finally:
            other.execute("ROLLBACK")
            other.close()
        record = await store.get("pc")
        assert record is not None and record.turn_count == 200
        assert store.status()["commits"] - commits_before >= 200 // 16
    finally:
        await store.close()


async def test_the_queue_stays_within_its_bound_and_drops_nothing(
    small: SQLiteTranscriptStore,
) -> None:
    sessions, writes = 5, 4000
    for n in range(sessions):
        small.open_session(f"pc{n}", None, {}, T0)
    depths = []
    for i in range(writes):  # no yield: the worst producer, holding the loop
        if i % 4 == 0:
            small.append_turn(f"pc{i % sessions}", "user", f"t{i}", T0 + i)
        else:
            small.append_event(f"pc{i % sessions}", "rtvi-error", {"i": i}, T0 + i)
        depths.append(small.status()["queue"]["depth"])
    queue = small.status()["queue"]
    assert max(depths) <= 64 and queue["max"] == 64 and queue["peak"] <= 64
    assert queue["waits"] > 0 and queue["wait_seconds"] > 0, "producers waited for room"
    listed = {s.id: s.turn_count for s in await small.list_sessions(limit=10)}
    assert listed == {f"pc{n}": writes // 4 // sessions for n in range(sessions)}
    assert count_entries(small.path) == writes
    status = small.status()
    assert status["pending_writes"] == 0 and status["failed_writes"] == 0
    assert status["commits"] < writes / 4, "writes were grouped into transactions"


async def test_a_failing_write_in_a_group_loses_only_itself(
    small: SQLiteTranscriptStore,
) -> None:
    small.open_session("pc", None, {}, T0)
    for i in range(20):
        small.append_turn("pc", "user", f"before {i}", T0 + i)
    small.append_turn("ghost", "user", "no such session", T0)  # violates the foreign key
    for i in range(20):
        small.append_turn("pc", "user", f"after {i}", T0 + 100 + i)
    record = await small.get("pc")
    assert record is not None
    assert [t.text for t in record.turns] == [f"before {i}" for i in range(20)] + [
        f"after {i}" for i in range(20)
    ]
    assert record.turn_count == 40
    status = small.status()
    assert status["failed_writes"] == 1 and status["ok"]
    assert "FOREIGN KEY" in status["last_error"]


async def test_bad_bounds_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_queue"):
        SQLiteTranscriptStore(tmp_path, max_queue=0)
    with pytest.raises(ValueError, match="max_batch"):
        SQLiteTranscriptStore(tmp_path, max_batch=0)
