"""What the session endpoints (``GET /api/sessions/{id}``, RTVI ``session-info``) say of
one call: its state, times, client, transport figures and its pipeline's own summary."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any


def _iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).isoformat()


def session_info(session: Any) -> dict[str, Any]:
    """A JSON-ready summary of ``session`` (a :class:`server.session.session.Session`; typed
    loosely, as naming it here would make the two modules import each other)."""
    idle = time.monotonic() - session.last_activity
    return {
        "pc_id": session.pc_id,
        "session_id": session.start_id,
        "state": session.state.value,
        "created_at": _iso(session.created_at),
        "last_activity": _iso(time.time() - idle),
        "idle_seconds": round(idle, 3),
        "client": vars(session.client).copy(),
        "transport": session.transport.kind,
        **session.transport.info(),
        "audio_frames_in": session.audio_frames_in,
        "request_data": session.request_data,
        "conversation": session.voice.info(),
        "video": session.video.info() if session.video is not None else None,
        "ui": session.ui.info(),
    }
