"""The PostgreSQL store's write jobs: each is one write of the store interface, run by
:class:`server.storage.postgres_writer.PostgresWriter` inside a group's transaction.

Each takes the rows of a run of consecutive writes of its kind (one ``executemany``: the
run goes to the server in one round trip). They mirror the SQLite store's jobs
(``server/storage/sqlite.py``); differences: a session row names the replica that writes
it (start-up recovery closes only its own) and the client's credential fingerprint has a
column (the history's filter, indexed). PostgreSQL refuses NUL characters and unpaired
surrogates in text, which a client may send: they become U+FFFD rather than losing the
write.
"""

from __future__ import annotations

import json
from typing import Any, LiteralString

from psycopg import AsyncConnection

from server.storage.sqlite import dump


def clean(text: str) -> str:
    """``text`` as PostgreSQL takes it (no NUL, valid UTF-8)."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate (from JSON's \ud800 escapes)
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def dump_clean(data: Any) -> str:
    """JSON for a column (see :func:`server.storage.sqlite.dump`), as PostgreSQL takes it."""
    return clean(dump(data))


Rows = list[tuple[Any, ...]]


async def _many(conn: AsyncConnection, query: LiteralString, rows: Rows) -> None:
    async with conn.cursor() as cur:
        await cur.executemany(query, rows)


async def open_session(conn: AsyncConnection, rows: Rows) -> None:
    """(session_id, replica, start_id, client, credential, at_us) each."""
    # A restarted peer connection keeps its pc_id: the record continues, open again.
    await _many(
        conn,
        "INSERT INTO sessions (id, replica, start_id, client, credential, started_us) "
        "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET ended_us = NULL, "
        "close_reason = NULL, client = excluded.client, credential = excluded.credential, "
        "replica = excluded.replica",
        rows,
    )


async def update_client(conn: AsyncConnection, rows: Rows) -> None:
    """(session_id, client, credential) each."""
    await _many(
        conn,
        "UPDATE sessions SET client = %s, credential = %s WHERE id = %s",
        [(client, credential, session_id) for session_id, client, credential in rows],
    )


async def append_turn(conn: AsyncConnection, rows: Rows) -> None:
    """(session_id, role, text, at_us, data, usage) each; the counts and the latest usage
    are the same whether the rows' updates follow each insert or all of them."""
    await _many(
        conn,
        "INSERT INTO entries (session_id, type, text, at_us, data, kind) "
        "VALUES (%s, %s, %s, %s, %s, 'turn')",
        [row[:5] for row in rows],
    )
    await _many(
        conn,
        "UPDATE sessions SET turn_count = turn_count + 1, usage = COALESCE(%s, usage) "
        "WHERE id = %s",
        [(row[5], row[0]) for row in rows],
    )


async def append_event(conn: AsyncConnection, rows: Rows) -> None:
    """(session_id, type, data, at_us) each."""
    await _many(
        conn,
        "INSERT INTO entries (session_id, type, data, at_us, kind) "
        "VALUES (%s, %s, %s, %s, 'event')",
        rows,
    )


async def fold_last_turn(conn: AsyncConnection, rows: Rows) -> None:
    """(session_id,) each."""
    for (session_id,) in rows:
        await _fold(conn, session_id)


async def _fold(conn: AsyncConnection, session_id: str) -> None:
    # The last user turn and the answers after it become turn-merged events whose data
    # gains their role and text (as SQLite's json_set does).
    cur = await conn.execute(
        "SELECT seq, type, text, data FROM entries WHERE session_id = %s AND kind = 'turn' "
        "AND seq >= (SELECT MAX(seq) FROM entries WHERE session_id = %s AND kind = 'turn' "
        "AND type = 'user') ORDER BY seq FOR UPDATE",
        (session_id, session_id),
    )
    folded = await cur.fetchall()
    for seq, role, text, data in folded:
        fields = {**json.loads(data), "role": role, "text": text}
        await conn.execute(
            "UPDATE entries SET kind = 'event', type = 'turn-merged', text = NULL, data = %s "
            "WHERE seq = %s",
            (dump_clean(fields), seq),
        )
    if folded:
        await conn.execute(
            "UPDATE sessions SET turn_count = turn_count - %s WHERE id = %s",
            (len(folded), session_id),
        )


async def close_session(conn: AsyncConnection, rows: Rows) -> None:
    """(session_id, reason, at_us, usage) each."""
    await _many(
        conn,
        "UPDATE sessions SET ended_us = %s, close_reason = %s, usage = COALESCE(%s, usage) "
        "WHERE id = %s",
        [(at_us, reason, usage, session_id) for session_id, reason, at_us, usage in rows],
    )
