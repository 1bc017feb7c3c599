"""The PostgreSQL store against a real PostgreSQL (started by the tests on 127.0.0.1 in a
temporary folder): the record round trip, the schema and its upgrade, two replicas
writing at once, history across them, and recovery of only a replica's own records."""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import AsyncIterator

import psycopg
import pytest

from server.settings import Settings
from server.storage.postgres import PostgresTranscriptStore
from server.storage.postgres_schema import SCHEMA_VERSION, SchemaTooNew, upgrade
from server.storage.sqlite import CRASHED, MAX_DATA_CHARS
from server.storage.store import StorageError
from testkit.postgres_server import PostgresServer, postgres_server  # noqa: F401 (a fixture)

pytestmark = pytest.mark.e2e  # starts PostgreSQL

T0 = 1_700_000_000.0
_databases = itertools.count()


@pytest.fixture
def database_url(postgres_server: PostgresServer) -> str:  # noqa: F811
    """A new, empty database for one test."""
    return postgres_server.create_database(f"test_{next(_databases)}")


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[PostgresTranscriptStore]:
    opened = PostgresTranscriptStore(database_url, replica="r1")
    await opened.start()
    yield opened
    await opened.close()


async def test_a_record_round_trips(store: PostgresTranscriptStore) -> None:
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
    by_start = await store.get("start1")
    assert by_start is not None and by_start.id == "pc1"
    assert await store.get("nobody") is None
    store.close_session("pc1", "deleted", T0 + 4, usage={"turns": 1})
    ended = await store.get("pc1")
    assert ended is not None and not ended.live
    assert ended.ended_at is not None
    assert (ended.close_reason, ended.ended_at.timestamp(), ended.usage) == (
        "deleted",
        T0 + 4,
        {"turns": 1},
    )
    status = store.status()
    assert status["backend"] == "postgres" and status["ok"] and status["schema_version"] == 2
    assert status["pending_writes"] == 0 and status["commits"] >= 1
    assert "@127.0.0.1:" in status["database"]


async def test_a_merged_turn_becomes_events_and_what_postgres_refuses_is_cleaned(
    store: PostgresTranscriptStore,
) -> None:
    store.open_session("pc", None, {"remote_addr": "1.2.3.4\x00"}, T0)
    store.append_turn("pc", "user", "first", T0 + 1)
    store.append_turn("pc", "assistant", "answer", T0 + 2)
    store.append_turn("pc", "user", "I was\x00 saying \ud800", T0 + 3)
    store.append_turn("pc", "assistant", "cut", T0 + 4, interrupted=True)
    store.fold_last_turn("pc")
    store.append_event("pc", "tool-result", {"result": "x" * (2 * MAX_DATA_CHARS)}, T0 + 5)
    record = await store.get("pc")
    assert record is not None and store.status()["failed_writes"] == 0
    assert [t.text for t in record.turns] == ["first", "answer"] and record.turn_count == 2
    merged = [e for e in record.events if e.type == "turn-merged"]
    assert [(e.data["role"], e.data["text"]) for e in merged] == [
        ("user", "I was\ufffd saying \ufffd"),
        ("assistant", "cut"),
    ]
    assert merged[1].data["interrupted"] is True
    assert record.client["remote_addr"] == "1.2.3.4\x00"  # JSON escapes it: kept
    assert len(record.events[-1].data["truncated"]) == MAX_DATA_CHARS


async def test_a_refused_write_is_counted_and_the_rest_of_its_group_kept(
    store: PostgresTranscriptStore,
) -> None:
    store.open_session("pc", None, {}, T0)
    store.append_turn("pc", "user", "before", T0 + 1)
    store.append_turn("ghost", "user", "no such session", T0 + 2)  # the foreign key
    record = await store.get("pc")
    assert record is not None and [t.text for t in record.turns] == ["before"]
    status = store.status()
    assert status["failed_writes"] == 1 and not status["ok"]
    assert "foreign key" in status["last_error"]
    store.append_turn("pc", "user", "after", T0 + 3)
    record = await store.get("pc")
    assert record is not None and [t.text for t in record.turns] == ["before", "after"]
    assert store.status()["ok"] and store.status()["failed_writes"] == 1
    # An answer the database gives every time (a value too large for an index) is a
    # refusal, not an outage: counted once, never retried.
    store.open_session("big", secrets.token_hex(5000), {}, T0)
    store.append_turn("pc", "user", "still fine", T0 + 4)
    record = await store.get("pc")
    assert record is not None and record.turns[-1].text == "still fine"
    status = store.status()
    assert status["failed_writes"] == 2 and status["retries"] == 0
    assert "index row" in status["last_error"]


async def test_the_schema_is_versioned_and_upgrades_itself(database_url: str) -> None:
    # A database made by the first version of the schema, with a record in it.
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        assert await upgrade(conn, target=1) == (0, 1)
        await conn.execute(
            "INSERT INTO sessions (id, replica, started_us, ended_us) "
            "VALUES ('old', 'r1', 1700000000000000, 1700000001000000)"
        )
    store = PostgresTranscriptStore(database_url, replica="r1")
    await store.start()
    try:
        assert store.schema == (1, SCHEMA_VERSION)
        assert [s.id for s in await store.list_sessions()] == ["old"]
        store.open_session("new", None, {"credential": "k1"}, T0 + 5)
        assert [s.id for s in await store.list_sessions(credential="k1")] == ["new"]
    finally:
        await store.close()
    again = PostgresTranscriptStore(database_url, replica="r1")
    await again.start()
    assert again.schema == (SCHEMA_VERSION, SCHEMA_VERSION)
    await again.close()


async def test_a_newer_schema_is_refused(store: PostgresTranscriptStore, database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("UPDATE parley_schema SET version = %s", (SCHEMA_VERSION + 1,))
    newer = PostgresTranscriptStore(database_url, replica="r2")
    with pytest.raises(SchemaTooNew, match=f"version {SCHEMA_VERSION + 1}, newer than"):
        await newer.start()


async def test_an_unreachable_database_is_a_clear_error_at_start(
    postgres_server: PostgresServer,  # noqa: F811
) -> None:
    url = postgres_server.url("no_such_database")
    with pytest.raises(StorageError, match="cannot keep transcripts in PostgreSQL at parley@"):
        await PostgresTranscriptStore(url).start()


async def test_two_replicas_write_at_once_and_each_lists_every_call(database_url: str) -> None:
    replicas = [PostgresTranscriptStore(database_url, replica=r) for r in ("r1", "r2")]
    # Both start together: the schema is made once (the migration lock).
    await asyncio.gather(*(r.start() for r in replicas))
    try:

        async def talk(store: PostgresTranscriptStore, n: int) -> None:
            pc = f"{store.replica}.pc{n}"
            store.open_session(pc, None, {"credential": store.replica}, T0 + n)
            for i in range(20):
                store.append_turn(pc, "user" if i % 2 else "assistant", f"{pc}:{i}", T0 + n + i)
                await asyncio.sleep(0)

        await asyncio.gather(*(talk(r, n) for r in replicas for n in range(10)))
        for r in replicas:
            await r.get("flush")  # each replica's writes are committed
        expected = {f"{r}.pc{n}" for r in ("r1", "r2") for n in range(10)}
        for reader in replicas:  # either replica pages through both replicas' calls
            seen: list[str] = []
            page = await reader.list_sessions(limit=3)
            while page:
                seen += [s.id for s in page]
                last = page[-1]
                before = last.started_at.timestamp()
                page = await reader.list_sessions(limit=3, before=before, before_id=last.id)
            assert len(seen) == len(set(seen)) and set(seen) == expected
            # Each start time is shared by one call of each replica: ties by id, descending.
            assert seen[:2] == ["r2.pc9", "r1.pc9"]
        record = await replicas[1].get("r1.pc3")  # a transcript written by the other one
        assert record is not None and [t.text for t in record.turns][-1] == "r1.pc3:19"
        assert len(await replicas[0].list_sessions(credential="r2", limit=100)) == 10
    finally:
        await asyncio.gather(*(r.close() for r in replicas))


async def test_recovery_closes_only_its_own_replicas_open_records(database_url: str) -> None:
    r1, r2 = (PostgresTranscriptStore(database_url, replica=r) for r in ("r1", "r2"))
    await r1.start()
    await r2.start()
    r1.open_session("r1.a", None, {}, T0)
    r1.append_turn("r1.a", "user", "one", T0 + 1)
    r2.open_session("r2.a", None, {}, T0)
    await r1.close()  # r1's session never closed: as after a SIGKILL
    await r2.get("r2.a")
    restarted = PostgresTranscriptStore(database_url, replica="r1")
    await restarted.start()
    try:
        mine = await restarted.get("r1.a")
        assert mine is not None and not mine.live and mine.close_reason == CRASHED
        assert mine.ended_at is not None and mine.ended_at.timestamp() == T0 + 1
        theirs = await restarted.get("r2.a")
        assert theirs is not None and theirs.live, "another replica's live call stays live"
    finally:
        await restarted.close()
        await r2.close()


async def test_purge_deletes_old_ended_sessions_only(store: PostgresTranscriptStore) -> None:
    store.open_session("old", None, {}, T0)
    store.append_turn("old", "user", "long ago", T0 + 1)
    store.close_session("old", "deleted", T0 + 2)
    store.open_session("recent", None, {}, T0 + 100)
    store.close_session("recent", "deleted", T0 + 101)
    store.open_session("live", None, {}, T0)
    assert await store.purge(older_than=T0 + 50) == 1
    assert [s.id for s in await store.list_sessions()] == ["recent", "live"]
    assert await store.get("old") is None


@pytest.mark.parametrize("limit", [1, 3, 4])
async def test_pages_cut_through_a_tie_without_skipping(
    store: PostgresTranscriptStore, limit: int
) -> None:
    # Ids that a locale's collation would order otherwise ("r1.B" < "r1.a" in bytes).
    starts = {"a1": T0 - 2, "r1.B": T0, "r1.a": T0, "r1-a": T0, "r2.A": T0, "z1": T0 + 1}
    for session_id, at in starts.items():
        store.open_session(session_id, None, {}, at)
    seen: list[str] = []
    page = await store.list_sessions(limit=limit)
    while page:
        seen += [s.id for s in page]
        last = page[-1]
        page = await store.list_sessions(
            limit=limit, before=last.started_at.timestamp(), before_id=last.id
        )
    assert seen == sorted(starts, key=lambda s: (starts[s], s), reverse=True)


def test_postgres_needs_a_url_and_never_shows_its_password() -> None:
    with pytest.raises(ValueError, match="storage=postgres needs PARLEY_DATABASE_URL"):
        Settings(storage="postgres")
    url = "postgresql://app:s3cret@db.example.com:6543/calls?sslmode=verify-full"
    settings = Settings(storage="postgres", database_url=url)
    assert "s3cret" not in repr(settings)
    store = PostgresTranscriptStore(settings.database_url.get_secret_value(), replica="r1")
    assert store.status()["database"] == "app@db.example.com:6543/calls"
    assert "s3cret" not in str(store.status())
