"""Liveness and session endpoints of our own (the Pipecat client does not use them)."""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel

from server import __version__
from server.process_stats import process_stats
from server.signalling import ERRORS, Registry

router = APIRouter()


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    version: str
    uptime_seconds: float
    sessions_active: int
    sessions_total: int
    max_sessions: int
    models: dict[str, Any]
    circuits: dict[str, Any] = {}
    process: dict[str, Any] = {}


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
    connection_state: str
    data_channel_open: bool
    pings: int
    audio_frames_in: int
    track_status: dict[str, bool | None]
    request_data: Any = None
    conversation: dict[str, Any] = {}


class SessionList(BaseModel):
    sessions: list[SessionInfo]


class Closed(BaseModel):
    pc_id: str
    state: Literal["closed"] = "closed"


@router.get("/health", response_model=Health, tags=["status"])
async def health(request: Request, registry: Registry) -> Health:
    """Liveness: answers as long as the event loop does."""
    return Health(
        version=__version__,
        uptime_seconds=round(time.monotonic() - request.app.state.started, 3),
        sessions_active=len(registry),
        sessions_total=registry.total_created,
        max_sessions=registry.settings.max_sessions,
        models=registry.services.status(),
        circuits=registry.services.circuits(),
        process=process_stats().as_dict(),
    )


@router.get("/api/sessions", response_model=SessionList, tags=["sessions"])
async def list_sessions(registry: Registry) -> dict[str, Any]:
    """Every live session."""
    return {"sessions": [s.info() for s in registry.sessions.values()]}


@router.get(
    "/api/sessions/{pc_id}", response_model=SessionInfo, responses=ERRORS, tags=["sessions"]
)
async def get_session(pc_id: str, registry: Registry) -> dict[str, Any]:
    """One live session."""
    session = registry.get(pc_id)
    if session is None:
        raise HTTPException(404, f"unknown pc_id {pc_id!r}")
    return session.info()


@router.delete("/api/sessions/{pc_id}", response_model=Closed, responses=ERRORS, tags=["sessions"])
async def delete_session(pc_id: str, registry: Registry) -> Closed:
    """Hang up: the peer connection is closed and everything the session owned is freed."""
    if not await registry.close(pc_id, "deleted"):
        raise HTTPException(404, f"unknown pc_id {pc_id!r}")
    return Closed(pc_id=pc_id)
