"""A PostgreSQL outage in the middle of a call (the real server stopped, then started
again on the same folder and port): writes wait and are retried, nothing queued is lost
or written twice (also when the answer to a COMMIT was lost: ``testkit.commit_cutter``),
the store says it is failing meanwhile, and past the queue's bound exactly what was
dropped is counted and logged."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from loguru import logger

from server.storage.postgres import PostgresTranscriptStore
from server.storage.store import StorageError
from testkit.commit_cutter import CommitCutter
from testkit.postgres_server import PostgresServer, postgres_or_skip

pytestmark = pytest.mark.e2e  # starts PostgreSQL

T0 = 1_700_000_000.0


@pytest.fixture
def server() -> Iterator[PostgresServer]:
    """A cluster of this test's own: the test stops and restarts it."""
    started = postgres_or_skip()
    try:
        yield started
    finally:
        started.remove()


@pytest.fixture
async def store(server: PostgresServer) -> AsyncIterator[PostgresTranscriptStore]:
    opened = PostgresTranscriptStore(
        server.create_database("parley"), replica="r1", read_timeout=1.0, close_timeout=1.0
    )
    await opened.start()
    yield opened
    await opened.close()


@pytest.fixture
def logged() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="WARNING")
    yield lines
    logger.remove(sink)


async def until(condition: object, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not callable(condition) or not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_an_outage_mid_call_loses_nothing(
    server: PostgresServer, store: PostgresTranscriptStore, logged: list[str]
) -> None:
    store.open_session("r1.pc", None, {}, T0)
    for i in range(3):
        store.append_turn("r1.pc", "user" if i % 2 == 0 else "assistant", f"turn {i}", T0 + i)
    assert await store.get("r1.pc") is not None  # committed before the outage

    server.stop()
    for i in range(3, 10):  # the call goes on: every write returns at once
        store.append_turn("r1.pc", "user" if i % 2 == 0 else "assistant", f"turn {i}", T0 + i)
        store.append_event("r1.pc", "interruption", {"n": i}, T0 + i)
        await asyncio.sleep(0.05)
    store.close_session("r1.pc", "deleted", T0 + 20, usage={"turns": 10})
    await until(lambda: not store.status()["ok"])
    status = store.status()
    assert status["pending_writes"] == 15 and status["failing_since"] is not None
    assert status["last_error"].startswith("database unreachable")
    assert status["dropped_writes"] == 0
    with pytest.raises(StorageError, match=r"unreachable.*15 writes wait"):
        await store.list_sessions()  # a read says why, quickly, and does not hang
    assert any("transcript database unreachable" in line for line in logged)

    server.start()
    await until(lambda: store.status()["pending_writes"] == 0)
    record = await store.get("r1.pc")
    assert record is not None and not record.live and record.close_reason == "deleted"
    assert [t.text for t in record.turns] == [f"turn {i}" for i in range(10)]
    assert [e.data["n"] for e in record.events] == list(range(3, 10))  # each once
    assert record.turn_count == 10 and record.usage == {"turns": 10}
    status = store.status()
    assert status["ok"] and status["retries"] > 0 and status["failed_writes"] == 0
    assert status["failing_since"] is None and status["dropped_writes"] == 0
    assert any("transcript database back after" in line for line in logged)


async def test_past_the_bound_what_was_dropped_is_counted_and_logged(
    server: PostgresServer, logged: list[str]
) -> None:
    url = server.create_database("bounded")
    store = PostgresTranscriptStore(url, replica="r1", max_queue=5, read_timeout=1.0)
    await store.start()
    try:
        store.open_session("r1.pc", None, {}, T0)
        await store.get("r1.pc")
        server.stop()
        # Without yielding to the writer: five wait in the queue, the rest are dropped.
        for i in range(8):
            store.append_turn("r1.pc", "user", f"turn {i}", T0 + i)
        for i in range(2):
            store.append_event("r1.pc", "error", {"n": i}, T0 + 10 + i)
        status = store.status()
        assert status["queue"]["depth"] == 5 and status["pending_writes"] == 5
        assert status["dropped_writes"] == 5
        assert status["dropped_by_kind"] == {"append_turn": 3, "append_event": 2}
        assert any("transcript queue full" in line and "r1.pc" in line for line in logged)
        await until(lambda: not store.status()["ok"])
        server.start()
        await until(lambda: store.status()["pending_writes"] == 0)
        record = await store.get("r1.pc")
        assert record is not None
        assert [t.text for t in record.turns] == [f"turn {i}" for i in range(5)]
        assert record.events == []
        assert any("dropped meanwhile: {'append_turn': 3" in line for line in logged)
    finally:
        await store.close()


async def test_shutdown_during_an_outage_counts_what_is_lost(
    server: PostgresServer, store: PostgresTranscriptStore, logged: list[str]
) -> None:
    store.open_session("r1.pc", None, {}, T0)
    await store.get("r1.pc")
    server.stop()
    store.append_turn("r1.pc", "user", "never written", T0 + 1)
    store.close_session("r1.pc", "deleted", T0 + 2)
    await store.close()  # waits close_timeout (1 s), then gives up
    assert store.status()["pending_writes"] == 2
    assert any("unreachable at shutdown: 2 writes lost" in line for line in logged)


async def test_a_group_whose_commit_answer_was_lost_is_not_written_twice(
    server: PostgresServer,
) -> None:
    server.create_database("cut")
    cutter = await CommitCutter(server.port).start()
    store = PostgresTranscriptStore(
        f"postgresql://parley@127.0.0.1:{cutter.port}/cut", replica="r1"
    )
    await store.start()
    try:
        store.open_session("r1.pc", None, {}, T0)
        await store.get("r1.pc")
        cutter.armed = True
        store.append_turn("r1.pc", "user", "said once", T0 + 1, usage={"turns": 1})
        store.append_event("r1.pc", "interruption", {}, T0 + 2)
        await until(lambda: cutter.cuts == 1 and store.status()["pending_writes"] == 0)
        record = await store.get("r1.pc")
        assert record is not None
        assert [t.text for t in record.turns] == ["said once"] and record.turn_count == 1
        assert [e.type for e in record.events] == ["interruption"]
        status = store.status()
        assert status["retries"] >= 1 and status["ok"] and status["failed_writes"] == 0
    finally:
        await store.close()
        await cutter.close()
