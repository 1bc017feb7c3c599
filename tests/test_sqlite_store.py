"""The SQLite transcript store on its own: durability settings, ordering, paging, purge,
crash recovery, and clear errors when it cannot open."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from server.storage import sqlite as sqlite_module
from server.storage.sqlite import CRASHED, MAX_DATA_CHARS, SQLiteTranscriptStore
from server.storage.store import StorageError

T0 = 1_700_000_000.0  # a fixed epoch time: records are dated explicitly


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteTranscriptStore]:
    opened = SQLiteTranscriptStore(tmp_path)
    await opened.start()
    yield opened
    await opened.close()


def pragma(path: Path, name: str) -> object:
    with sqlite3.connect(path) as db:
        value = db.execute(f"PRAGMA {name}").fetchone()[0]
    db.close()
    return value


async def test_the_file_is_in_wal_mode_with_the_schema(
    store: SQLiteTranscriptStore, tmp_path: Path
) -> None:
    assert store.path == tmp_path / "transcripts.db"
    assert pragma(store.path, "journal_mode") == "wal"
    assert pragma(store.path, "user_version") == 1
    assert store.status()["ok"] is True


async def test_a_record_round_trips(store: SQLiteTranscriptStore) -> None:
    store.open_session("pc1", "start1", {"remote_addr": "127.0.0.1"}, T0)
    store.update_client("pc1", {"remote_addr": "127.0.0.1", "library": "js", "x": None})
    store.append_turn("pc1", "user", "Hi there", T0 + 1, started_at="2023-11-14T22:13:20Z")
    store.append_event("pc1", "tool-call", {"function_name": "f", "arguments": {"a": 1}}, T0 + 2)
    usage = {"usage": {"total_tokens": 12, "cost_usd": 0.001}}
    store.append_turn(
        "pc1", "assistant", "Hello", T0 + 3, interrupted=True, metrics={"ttfb": {}}, usage=usage
    )
    record = await store.get("pc1")
    assert record is not None and record.live and record.turn_count == 2
    assert record.client["library"] == "js"
    assert [(t.role, t.text, t.interrupted) for t in record.turns] == [
        ("user", "Hi there", False),
        ("assistant", "Hello", True),
    ]
    assert record.turns[0].started_at == "2023-11-14T22:13:20Z"
    assert record.turns[1].metrics == {"ttfb": {}}
    assert record.turns[1].at.timestamp() == T0 + 3
    assert [e.seq for e in record.events] == [record.turns[0].seq + 1]
    assert record.events[0].data["arguments"] == {"a": 1}
    assert record.usage == usage
    # The /start session id finds the same record.
    by_start = await store.get("start1")
    assert by_start is not None and by_start.id == "pc1"
    assert await store.get("nobody") is None

    store.close_session("pc1", "deleted", T0 + 4, usage={"turns": 1})
    ended = await store.get("pc1")
    assert ended is not None and not ended.live
    assert (ended.close_reason, ended.ended_at.timestamp(), ended.usage) == (
        "deleted",
        T0 + 4,
        {"turns": 1},
    )


async def test_concurrent_sessions_keep_every_turn_in_order(
    store: SQLiteTranscriptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions, turns = 20, 25
    writers: set[int] = set()  # the threads the turns were written on
    append = sqlite_module._append_turn

    def recorded(*args: Any) -> None:
        writers.add(threading.get_ident())
        append(*args)

    monkeypatch.setattr(sqlite_module, "_append_turn", recorded)

    async def talk(n: int) -> None:
        store.open_session(f"pc{n}", None, {}, T0 + n)
        for i in range(turns):
            store.append_turn(f"pc{n}", "user" if i % 2 else "assistant", f"{n}:{i}", T0 + i)
            await asyncio.sleep(0)  # interleave the sessions' writes

    started = time.perf_counter()
    await asyncio.gather(*(talk(n) for n in range(sessions)))
    listed = await store.list_sessions(limit=100)
    elapsed = time.perf_counter() - started
    print(f"{sessions * turns} turns in {elapsed:.2f} s ({sessions * turns / elapsed:.0f}/s)")
    assert store.status()["pending_writes"] == 0
    assert store.status()["failed_writes"] == 0
    # Queued, not made on the loop (how many were pending when the gather returned
    # depends on the machine: a CI run once found none).
    assert writers and threading.get_ident() not in writers
    assert {s.id: s.turn_count for s in listed} == {f"pc{n}": turns for n in range(sessions)}
    for n in (0, 7, 19):
        record = await store.get(f"pc{n}")
        assert record is not None
        assert [t.text for t in record.turns] == [f"{n}:{i}" for i in range(turns)]


async def test_listing_is_newest_first_and_pages_with_before(
    store: SQLiteTranscriptStore,
) -> None:
    for n in range(7):
        store.open_session(f"pc{n}", None, {}, T0 + n * 0.000_001 + n)
    first = await store.list_sessions(limit=3)
    assert [s.id for s in first] == ["pc6", "pc5", "pc4"]
    seen = [s.id for s in first]
    before = first[-1].started_at.timestamp()
    while page := await store.list_sessions(limit=3, before=before):
        seen += [s.id for s in page]
        before = page[-1].started_at.timestamp()
    assert seen == [f"pc{n}" for n in reversed(range(7))]


async def test_purge_deletes_old_ended_sessions_only(store: SQLiteTranscriptStore) -> None:
    store.open_session("old", None, {}, T0)
    store.append_turn("old", "user", "long ago", T0 + 1)
    store.close_session("old", "deleted", T0 + 2)
    store.open_session("recent", None, {}, T0 + 100)
    store.close_session("recent", "deleted", T0 + 101)
    store.open_session("live", None, {}, T0)  # started long ago, still going
    assert await store.purge(older_than=T0 + 50) == 1
    assert [s.id for s in await store.list_sessions()] == ["recent", "live"]
    assert await store.get("old") is None
    with sqlite3.connect(store.path) as db:
        left = db.execute("SELECT COUNT(*) FROM entries WHERE session_id = 'old'").fetchone()[0]
    db.close()
    assert left == 0, "the entries went with their session"


async def test_records_left_open_by_a_crash_are_closed_at_start(tmp_path: Path) -> None:
    first = SQLiteTranscriptStore(tmp_path)
    await first.start()
    first.open_session("pc", None, {}, T0)
    first.append_turn("pc", "user", "one", T0 + 1)
    first.append_turn("pc", "assistant", "two", T0 + 2)
    await first.close()  # the session never closed: as after a SIGKILL
    second = SQLiteTranscriptStore(tmp_path)
    await second.start()
    try:
        record = await second.get("pc")
        assert record is not None and not record.live
        assert record.close_reason == CRASHED
        assert record.ended_at is not None and record.ended_at.timestamp() == T0 + 2
        assert [t.text for t in record.turns] == ["one", "two"]
    finally:
        await second.close()


async def test_a_restarted_pc_id_continues_its_record(store: SQLiteTranscriptStore) -> None:
    store.open_session("pc", None, {"n": 1}, T0)
    store.append_turn("pc", "user", "before", T0 + 1)
    store.close_session("pc", "restart", T0 + 2)
    store.open_session("pc", None, {"n": 2}, T0 + 3)
    store.append_turn("pc", "user", "after", T0 + 4)
    record = await store.get("pc")
    assert record is not None and record.live and record.close_reason is None
    assert record.started_at.timestamp() == T0 and record.client == {"n": 2}
    assert [t.text for t in record.turns] == ["before", "after"]


async def test_large_data_is_cut_and_bad_writes_are_counted(
    store: SQLiteTranscriptStore,
) -> None:
    store.open_session("pc", None, {}, T0)
    store.append_event("pc", "tool-result", {"result": "x" * (2 * MAX_DATA_CHARS)}, T0)
    circular: dict[str, object] = {}
    circular["self"] = circular
    store.append_event("pc", "tool-result", {"result": circular}, T0)  # does not raise
    store.append_turn("ghost", "user", "no such session", T0)  # violates the foreign key
    record = await store.get("pc")
    assert record is not None
    assert len(record.events[0].data["truncated"]) == MAX_DATA_CHARS
    assert "Circular reference" in record.events[1].data["unserializable"]
    status = store.status()
    assert status["failed_writes"] == 1 and not status["ok"]
    assert "FOREIGN KEY" in status["last_error"]
    store.append_turn("pc", "user", "fine again", T0)
    assert (await store.get("pc")) is not None
    status = store.status()
    assert status["ok"] and status["failed_writes"] == 1 and status["last_error"]


async def test_an_unusable_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(StorageError, match=r"cannot keep transcripts in .*PARLEY_DATA_DIR"):
        await SQLiteTranscriptStore(not_a_dir / "data").start()
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "transcripts.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StorageError, match="not a database"):
        await SQLiteTranscriptStore(garbage).start()


async def test_a_second_store_on_the_same_dir_is_refused(
    store: SQLiteTranscriptStore, tmp_path: Path
) -> None:
    with pytest.raises(StorageError, match="another Parley server"):
        await SQLiteTranscriptStore(tmp_path).start()
    store.open_session("pc", None, {}, T0)  # the first one still works
    assert await store.get("pc") is not None
