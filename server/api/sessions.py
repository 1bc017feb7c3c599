"""Session endpoints of our own (the Pipecat client does not use them): list, inspect and
close live sessions, push a server message, summarize the context."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel

from server.api.signalling import ERRORS, Registry
from server.guards.auth import Owner

router = APIRouter()


class ClientInfoModel(BaseModel):
    remote_addr: str | None = None
    user_agent: str | None = None
    library: str | None = None
    library_version: str | None = None
    platform: str | None = None
    rtvi_version: str | None = None


class SessionInfo(BaseModel):
    pc_id: str
    session_id: str | None
    state: str
    created_at: str
    last_activity: str
    idle_seconds: float
    client: ClientInfoModel
    transport: str = "webrtc"  # "webrtc", "phone" or "websocket"
    connection_state: str
    data_channel_open: bool  # the event channel: WebRTC's data channel, a WebSocket
    pings: int = 0
    audio_frames_in: int
    audio_packets_dropped: int = 0  # over the audio budget, before decoding
    audio_packets_lost: int = 0  # WebRTC: never arrived (concealed when few)
    audio_packets_late: int = 0  # WebRTC: arrived behind the sequence, dropped
    audio_packets_concealed: int = 0  # WebRTC: lost ones filled in by the decoder
    track_status: dict[str, bool | None] = {}
    provider: str | None = None  # a phone call's telephony provider
    call_id: str | None = None  # the provider's id of the call
    marks_played: int | None = None  # a phone call's markers the provider played back
    messages_dropped: int | None = None  # a WebSocket call's, over its message budget
    request_data: Any = None
    conversation: dict[str, Any] = {}
    ui: dict[str, Any] = {}  # the UI worker protocol: snapshots, events, job groups
    video: dict[str, Any] | None = None  # per source (camera, screen), with PARLEY_LLM_VISION


class SessionList(BaseModel):
    sessions: list[SessionInfo]


class Closed(BaseModel):
    pc_id: str
    state: Literal["closed"] = "closed"


@router.get("/api/sessions", response_model=SessionList, tags=["sessions"])
async def list_sessions(registry: Registry, owner: Owner) -> dict[str, Any]:
    """Every live session (with API keys: those made with the caller's key)."""
    sessions = [registry.get_owned(pc_id, owner) for pc_id in list(registry.sessions)]
    return {"sessions": [s.info() for s in sessions if s is not None]}


@router.get(
    "/api/sessions/{pc_id}", response_model=SessionInfo, responses=ERRORS, tags=["sessions"]
)
async def get_session(pc_id: str, registry: Registry, owner: Owner) -> dict[str, Any]:
    """One live session."""
    session = registry.get_owned(pc_id, owner)
    if session is None:
        raise HTTPException(404, f"unknown pc_id {pc_id!r}")
    return session.info()


@router.delete("/api/sessions/{pc_id}", response_model=Closed, responses=ERRORS, tags=["sessions"])
async def delete_session(pc_id: str, registry: Registry, owner: Owner) -> Closed:
    """Hang up: the peer connection is closed and everything the session owned is freed."""
    session = registry.get_owned(pc_id, owner)
    if session is None:
        raise HTTPException(404, f"unknown pc_id {pc_id!r}")
    await session.close("deleted")
    return Closed(pc_id=pc_id)


class ServerMessageRequest(BaseModel):
    """``data`` goes to the client as it is, in an RTVI ``server-message``."""

    data: Any


class Sent(BaseModel):
    pc_id: str
    sent: Literal[True] = True


@router.post(
    "/api/sessions/{pc_id}/server-message",
    response_model=Sent,
    responses=ERRORS,
    tags=["sessions"],
)
async def post_server_message(
    pc_id: str, body: ServerMessageRequest, registry: Registry, owner: Owner
) -> Sent:
    """Push an app-defined message to the session's client (queued until its channel opens)."""
    session = registry.get_owned(pc_id, owner)
    if session is None:
        raise HTTPException(404, f"unknown pc_id {pc_id!r}")
    session.send_server_message(body.data)
    return Sent(pc_id=pc_id)


class SummaryOutcome(BaseModel):
    """What summarizing did: ``status`` is ``applied``, ``nothing-to-summarize``,
    ``stale`` (the conversation moved on meanwhile) or ``failed`` (with ``error``)."""

    pc_id: str
    status: Literal["applied", "nothing-to-summarize", "stale", "failed"]
    summarized_messages: int = 0
    tokens_before: int | None = None
    tokens_after: int | None = None
    error: str | None = None


@router.post(
    "/api/sessions/{pc_id}/summarize",
    response_model=SummaryOutcome,
    responses=ERRORS,
    tags=["sessions"],
)
async def post_summarize(pc_id: str, registry: Registry, owner: Owner) -> SummaryOutcome:
    """Replace the session's older history by a summary now (the last messages are kept)."""
    session = registry.get_owned(pc_id, owner)
    if session is None:
        raise HTTPException(404, f"unknown pc_id {pc_id!r}")
    return SummaryOutcome(pc_id=pc_id, **await session.summarize_context())
