"""Session records and where they are kept: the :class:`TranscriptStore` interface.

A record is one session's start and end, who the client was, its turns (what the user
said, what the assistant said and whether it was interrupted), the events around them
(interruptions, tool calls and results, errors) and its usage and cost. Writes are fire
and forget: they return at once (an event handler calls them), and a store applies them
in the order they were made. Reads are awaited and see every write made before them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

# How often old records are purged while the server runs (also once at start-up).


@dataclass
class ClientInfo:
    """Who is on the other end: from the HTTP request and from ``client-ready``."""

    remote_addr: str | None = None
    user_agent: str | None = None
    library: str | None = None
    library_version: str | None = None
    platform: str | None = None
    rtvi_version: str | None = None
    # Fingerprint of the API key that made the session (never the key); None when open.
    credential: str | None = None


class StorageError(Exception):
    """The store cannot be opened (unwritable data dir, not a database, in use)."""


class Turn(BaseModel):
    """One completed turn: a user's words, or an assistant answer as it was delivered."""

    seq: int = Field(description="Position among all turns and events of the session.")
    role: Literal["user", "assistant"]
    text: str
    at: datetime = Field(description="When the turn completed.")
    started_at: str | None = Field(None, description="When the turn began (ISO 8601).")
    interrupted: bool = Field(False, description="The user barged in on this answer.")
    metrics: dict[str, Any] | None = Field(
        None, description="For answers: TTFB and processing per service, tokens and cost."
    )


class RecordedEvent(BaseModel):
    """Something that happened besides turns: an interruption, a tool call, an error."""

    seq: int
    type: str = Field(
        description="interruption, tool-call, tool-result, tool-cancelled, error, "
        "rejected-messages (the RTVI errors the client was sent, counted by reason: "
        "{counts, examples, total, since}), turn-merged, backchannel ({text, started_at}: "
        "the user listening over the bot), discard ({reason, text, started_at}: the user's "
        "speech that made no turn, and why: echo, no_words, muted, stt_error or call_ended; see "
        "pipeline/hearing/discards.py)"
    )
    at: datetime
    data: dict[str, Any] = {}


class SessionSummary(BaseModel):
    """A session as listed by ``GET /api/history``."""

    id: str = Field(description="The peer connection id (pc_id).")
    session_id: str | None = Field(None, description="The /start session id, if any.")
    started_at: datetime
    ended_at: datetime | None = None
    close_reason: str | None = None
    turn_count: int = 0
    live: bool = Field(description="Still open: no end recorded yet.")


class SessionRecord(SessionSummary):
    """The whole record, as served by ``GET /api/sessions/{id}/transcript``."""

    client: dict[str, Any] = {}
    usage: dict[str, Any] = Field(
        {}, description="Totals so far: turns, tokens and cost, TTFB medians per service."
    )
    turns: list[Turn] = []
    events: list[RecordedEvent] = []


class TranscriptStore(Protocol):
    """Where session records go. Times are epoch seconds (``time.time()``)."""

    name: str

    async def start(self) -> None:
        """Open (create the schema, recover records a crash left open); may raise
        :class:`StorageError`."""
        ...

    def open_session(
        self, session_id: str, start_id: str | None, client: dict[str, Any], at: float
    ) -> None: ...

    def update_client(self, session_id: str, client: dict[str, Any]) -> None: ...

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
        """One completed turn; ``usage`` (the session's totals so far) replaces the last."""
        ...

    def append_event(
        self, session_id: str, type_: str, data: dict[str, Any], at: float
    ) -> None: ...

    def fold_last_turn(self, session_id: str) -> None:
        """The last user turn and the answers after it were taken back (the user went on:
        the turn continues): they become ``turn-merged`` events, with their role, text
        and figures, so the turns hold each user turn once and nothing is lost."""
        ...

    def close_session(
        self, session_id: str, reason: str, at: float, usage: dict[str, Any] | None = None
    ) -> None: ...

    async def get(self, session_id: str) -> SessionRecord | None:
        """By pc_id, or by /start session id (the latest session made from it)."""
        ...

    async def list_sessions(
        self,
        limit: int = 50,
        before: float | None = None,
        credential: str | None = None,
        before_id: str | None = None,
    ) -> list[SessionSummary]:
        """Newest first, ties by id (descending); ``before``: only sessions that started
        strictly before it, or with ``before_id`` too, at the same time with a smaller id
        (the last session of the previous page: a keyset, so equal times are not skipped);
        ``credential``: only sessions made with that API key (its fingerprint)."""
        ...

    async def purge(self, older_than: float) -> int:
        """Delete sessions that ended before ``older_than``; returns how many."""
        ...

    def status(self) -> dict[str, Any]:
        """For /health: backend, whether writes succeed, pending and failed writes (and for
        a store with a write queue, its depth, bound and producers' waits)."""
        ...

    async def close(self) -> None:
        """Apply every pending write, then release the store."""
        ...


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_us(at: float) -> int:
    """Epoch seconds as whole microseconds (how times are stored and compared)."""
    return round(at * 1_000_000)


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


# What a SQL store selects for a session's summary, and the summary made of such a row
# (SQLite and PostgreSQL keep the same columns).
SUMMARY_COLUMNS = "id, start_id, started_us, ended_us, close_reason, turn_count, ended_us IS NULL"


def summary_from_row(row: tuple[Any, ...]) -> SessionSummary:
    return SessionSummary(
        id=row[0],
        session_id=row[1],
        started_at=from_us(row[2]),
        ended_at=from_us(row[3]) if row[3] is not None else None,
        close_reason=row[4],
        turn_count=row[5],
        live=bool(row[6]),
    )
