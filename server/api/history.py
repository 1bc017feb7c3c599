"""Session records over HTTP: one session's transcript and call recording, and the
history of sessions.

All read the transcript store, so they serve live and ended sessions alike, and the
history survives restarts (with ``storage=sqlite``). With API keys, a caller sees only
the sessions made with its own key. A recording (``PARLEY_RECORDING``) is served under
its transcript's keys: the record says whose the call is, the recordings folder
(:mod:`server.storage.recordings`) whether it was recorded.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel, Field

from server.api.signalling import ERRORS
from server.guards.auth import Owner, owns
from server.storage.recordings import MEDIA_TYPE, RecordingDirectory, read_chunks
from server.storage.store import SessionRecord, SessionSummary, TranscriptStore

router = APIRouter(tags=["history"])


def get_store(request: Request) -> TranscriptStore:
    return request.app.state.store


Store = Annotated[TranscriptStore, Depends(get_store)]


def get_recordings(request: Request) -> RecordingDirectory:
    return request.app.state.recordings


Recordings = Annotated[RecordingDirectory, Depends(get_recordings)]


class HistoryEntry(SessionSummary):
    recording: bool = Field(
        False, description="The call was recorded: GET /api/sessions/{id}/recording has it."
    )


class History(BaseModel):
    sessions: list[HistoryEntry]
    next_before: datetime | None = Field(
        None, description="Pass as `before` for the next (older) page; null on the last page."
    )
    next_before_id: str | None = Field(
        None,
        description="Pass as `before_id` with `next_before`, so that sessions which started "
        "at the same time as the last one listed are on the next page, not skipped.",
    )
    storage: str = Field(
        description="sqlite, postgres (every replica's sessions), or none (live sessions only)."
    )


@router.get(
    "/api/sessions/{session_id}/transcript",
    response_class=Response,
    responses={200: {"model": SessionRecord}, **ERRORS},
)
async def get_transcript(session_id: str, store: Store, owner: Owner) -> Response:
    """A session's record, live or ended, by pc_id or by /start session id (with API
    keys: only a session made with the caller's key)."""
    record = await _owned_record(store, session_id, owner)
    # A long session's record is large: encode it off the event loop.
    body = await asyncio.to_thread(record.model_dump_json)
    return Response(body, media_type="application/json")


async def _owned_record(
    store: TranscriptStore, session_id: str, owner: str | None
) -> SessionRecord:
    """``session_id``'s record if the caller may see it; else 404 (the same answer as for
    no such session: ids are not confirmed to whoever asks)."""
    record = await store.get(session_id)
    if record is None or not owns(record.client.get("credential"), owner):
        raise HTTPException(404, f"no session record for {session_id!r}")
    return record


@router.get(
    "/api/sessions/{session_id}/recording",
    response_class=FileResponse,
    responses={
        200: {"content": {MEDIA_TYPE: {}}, "description": "Ogg/Opus, two channels"},
        **ERRORS,
    },
)
async def get_recording(
    session_id: str, store: Store, recordings: Recordings, owner: Owner
) -> Response:
    """A session's call recording (Ogg/Opus: the caller left, the bot right), by pc_id or
    by /start session id, under the same keys as its transcript. A live call's recording
    is served as far as it is written."""
    record = await _owned_record(store, session_id, owner)
    path = recordings.path(record.id)
    if path is None or not await asyncio.to_thread(path.is_file):
        raise HTTPException(404, f"no recording of session {session_id!r}")
    if record.live:  # growing: what is written now (a file response would overrun its length)
        return await _written_so_far(recordings, record.id, session_id)
    return FileResponse(path, media_type=MEDIA_TYPE, filename=path.name)


async def _written_so_far(
    recordings: RecordingDirectory, pc_id: str, session_id: str
) -> StreamingResponse:
    """A live recording as far as it is written now, streamed from the disk a chunk at a
    time (each read in a thread): read whole, a long call's file would sit in memory
    once for each GET."""
    written = await asyncio.to_thread(recordings.open_written, pc_id)
    if written is None:
        raise HTTPException(404, f"no recording of session {session_id!r}")
    file, size = written
    # A sync iterator: Starlette runs each step in its thread pool, off the event loop.
    chunks = read_chunks(file, size)
    headers = {"Content-Length": str(size)}
    return StreamingResponse(chunks, media_type=MEDIA_TYPE, headers=headers)


@router.get("/api/history", response_model=History, responses=ERRORS)
async def get_history(
    store: Store,
    recordings: Recordings,
    owner: Owner,
    limit: Annotated[int, Query(ge=1, le=500, description="Sessions per page.")] = 50,
    before: Annotated[
        datetime | None,
        Query(description="Only sessions started before this time (ISO 8601; UTC if naive)."),
    ] = None,
    before_id: Annotated[
        str | None,
        Query(
            max_length=256,
            description="With `before`: also sessions started at exactly that time whose id "
            "sorts before this one (the previous page's `next_before_id`).",
        ),
    ] = None,
) -> History:
    """Sessions, newest first (ties by id), ended ones included (with API keys: the
    caller's). Page with ``next_before`` and ``next_before_id``."""
    if before_id is not None and before is None:
        raise HTTPException(422, "before_id needs before (pass both from the previous page)")
    if before is not None and before.tzinfo is None:
        before = before.replace(tzinfo=UTC)
    timestamp = before.timestamp() if before else None
    summaries = await store.list_sessions(limit, timestamp, owner, before_id)
    sessions = await asyncio.to_thread(_with_recordings, summaries, recordings)
    if len(sessions) < limit:
        return History(sessions=sessions, storage=store.name)
    last = sessions[-1]
    return History(
        sessions=sessions, next_before=last.started_at, next_before_id=last.id,
        storage=store.name,
    )  # fmt: skip


def _with_recordings(
    summaries: list[SessionSummary], recordings: RecordingDirectory
) -> list[HistoryEntry]:
    """The summaries, each saying whether its call was recorded (a file each: in a thread)."""
    return [
        HistoryEntry(**summary.model_dump(), recording=recordings.has(summary.id))
        for summary in summaries
    ]
