"""``storage=none``: nothing is written anywhere; live sessions' records are kept in memory
(so their transcripts can still be read) and forgotten when they end."""

from __future__ import annotations

from typing import Any, Literal

from server.storage.store import RecordedEvent, SessionRecord, SessionSummary, Turn, from_us, to_us

_MERGED = "turn-merged"


class MemoryTranscriptStore:
    """A :class:`server.storage.store.TranscriptStore` that keeps live sessions only."""

    name = "none"

    def __init__(self) -> None:
        self._records: dict[str, SessionRecord] = {}
        self._seq = 0

    async def start(self) -> None:
        return None

    def open_session(
        self, session_id: str, start_id: str | None, client: dict[str, Any], at: float
    ) -> None:
        self._records[session_id] = SessionRecord(
            id=session_id, session_id=start_id, started_at=from_us(to_us(at)), live=True,
            client=client,
        )  # fmt: skip

    def update_client(self, session_id: str, client: dict[str, Any]) -> None:
        if record := self._records.get(session_id):
            record.client = client

    def append_turn(
        self,
        session_id: str,
        role: Literal["user", "assistant"],
        text: str,
        at: float,
        *,
        started_at: str | None = None,
        interrupted: bool = False,
        metrics: dict[str, Any] | None = None,
        usage: dict[str, Any] | None = None,
    ) -> None:
        if (record := self._records.get(session_id)) is None:
            return
        self._seq += 1
        turn = Turn(
            seq=self._seq, role=role, text=text, at=from_us(to_us(at)), started_at=started_at,
            interrupted=interrupted, metrics=metrics,
        )  # fmt: skip
        record.turns.append(turn)
        record.turn_count += 1
        if usage is not None:
            record.usage = usage

    def append_event(self, session_id: str, type_: str, data: dict[str, Any], at: float) -> None:
        if (record := self._records.get(session_id)) is None:
            return
        self._seq += 1
        record.events.append(
            RecordedEvent(seq=self._seq, type=type_, at=from_us(to_us(at)), data=data)
        )

    def fold_last_turn(self, session_id: str) -> None:
        if (record := self._records.get(session_id)) is None:
            return
        users = [i for i, t in enumerate(record.turns) if t.role == "user"]
        if not users:
            return
        folded, record.turns = record.turns[users[-1] :], record.turns[: users[-1]]
        record.turn_count -= len(folded)
        for turn in folded:
            data = turn.model_dump(mode="json", exclude={"seq", "at"})
            record.events.append(RecordedEvent(seq=turn.seq, type=_MERGED, at=turn.at, data=data))
        record.events.sort(key=lambda e: e.seq)

    def close_session(
        self, session_id: str, reason: str, at: float, usage: dict[str, Any] | None = None
    ) -> None:
        self._records.pop(session_id, None)

    async def get(self, session_id: str) -> SessionRecord | None:
        record = self._records.get(session_id)
        if record is None:
            record = next((r for r in self._records.values() if r.session_id == session_id), None)
        return record.model_copy(deep=True) if record else None

    async def list_sessions(
        self,
        limit: int = 50,
        before: float | None = None,
        credential: str | None = None,
        before_id: str | None = None,
    ) -> list[SessionSummary]:
        records = sorted(self._records.values(), key=lambda r: (r.started_at, r.id), reverse=True)
        if before is not None:
            # (time, id) is the ordering's keyset: with before_id, sessions that started in
            # the same microsecond as the last one listed are not skipped.
            cursor = (from_us(to_us(before)), before_id)
            if before_id is None:
                records = [r for r in records if r.started_at < cursor[0]]
            else:
                records = [r for r in records if (r.started_at, r.id) < cursor]
        if credential is not None:
            records = [r for r in records if r.client.get("credential") == credential]
        fields = set(SessionSummary.model_fields)
        return [SessionSummary(**r.model_dump(include=fields)) for r in records[:limit]]

    async def purge(self, older_than: float) -> int:
        return 0

    def status(self) -> dict[str, Any]:
        return {"backend": self.name, "ok": True, "live_records": len(self._records)}

    async def close(self) -> None:
        self._records.clear()
