"""The PostgreSQL store's reads: one record, and the history of every replica's sessions
in the same order and keyset paging as SQLite (``started_us`` descending, ties by id)."""

from __future__ import annotations

import json
from typing import Any

from psycopg import AsyncConnection

from server.storage.store import (
    SUMMARY_COLUMNS,
    RecordedEvent,
    SessionRecord,
    SessionSummary,
    Turn,
    from_us,
    summary_from_row,
    to_us,
)


async def read_record(conn: AsyncConnection, session_id: str) -> SessionRecord | None:
    """By pc_id, or by /start session id (the latest session made from it)."""
    cur = await conn.execute(
        f"SELECT {SUMMARY_COLUMNS}, client, usage FROM sessions WHERE id = %s "
        "OR start_id = %s ORDER BY id = %s DESC, started_us DESC LIMIT 1",
        (session_id, session_id, session_id),
    )
    row = await cur.fetchone()
    if row is None:
        return None
    record = SessionRecord(
        **summary_from_row(row).model_dump(), client=json.loads(row[7]), usage=json.loads(row[8])
    )
    cur = await conn.execute(
        "SELECT seq, at_us, kind, type, text, data FROM entries WHERE session_id = %s ORDER BY seq",
        (record.id,),
    )
    async for seq, at_us, kind, type_, text, data in cur:
        fields = json.loads(data)
        if kind == "turn":
            record.turns.append(Turn(seq=seq, role=type_, text=text, at=from_us(at_us), **fields))
        else:
            record.events.append(RecordedEvent(seq=seq, type=type_, at=from_us(at_us), data=fields))
    return record


async def read_sessions(
    conn: AsyncConnection,
    limit: int,
    before: float | None,
    credential: str | None,
    before_id: str | None,
) -> list[SessionSummary]:
    """Newest first; see :meth:`server.storage.store.TranscriptStore.list_sessions`."""
    conditions: list[str] = []
    args: list[Any] = []
    if before is not None and before_id is not None:
        # The keyset of the ordering below: sessions that started in the same microsecond
        # as the last one listed are not skipped. (A row comparison uses the index.)
        conditions.append("(started_us, id) < (%s, %s)")
        args += [to_us(before), before_id]
    elif before is not None:
        conditions.append("started_us < %s")
        args.append(to_us(before))
    if credential is not None:
        conditions.append("credential = %s")
        args.append(credential)
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    cur = await conn.execute(
        f"SELECT {SUMMARY_COLUMNS} FROM sessions {where} "
        "ORDER BY started_us DESC, id DESC LIMIT %s",
        (*args, limit),
    )
    return [summary_from_row(row) for row in await cur.fetchall()]
