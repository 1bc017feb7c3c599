"""``{"type": "signalling", "message": ...}`` on the data channel: what Pipecat's
SmallWebRTC client sends besides RTVI (``trackStatus``: it muted or unmuted a track),
validated before the session keeps any of it, and what the server sends (``peerLeft``).

What is kept shows in ``GET /api/sessions`` for everyone allowed to list sessions, so
only values of the declared types and a bounded number of them are ever kept.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from server.rtvi.protocol import RTVIError

# Media sections an offer may have (a browser sends 2 or 3: audio, camera, screen), and so
# receivers a session can have: HTTP signalling refuses offers with more.
MAX_RECEIVERS = 16
INVALID = "invalid signalling message"


class TrackStatus(BaseModel):
    """The client enabled or disabled the track of its ``receiver_index``-th receiver."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["trackStatus"]
    receiver_index: StrictInt = Field(ge=0, lt=MAX_RECEIVERS)
    enabled: StrictBool


def parse(message: Any) -> TrackStatus:
    """A client's signalling message, validated; else :class:`RTVIError` saying why."""
    if not isinstance(message, dict):
        raise RTVIError(f"{INVALID}: must be a JSON object", reason=INVALID)
    if message.get("type") != "trackStatus":
        kind = str(message.get("type"))[:40]
        raise RTVIError(f"{INVALID}: unknown type {kind!r}", reason=INVALID)
    try:
        return TrackStatus.model_validate(message)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "message"
        raise RTVIError(f"{INVALID}: {where}: {err['msg']}", reason=INVALID) from None


def peer_left() -> dict[str, Any]:
    """Sent before the server hangs up."""
    return {"type": "signalling", "message": {"type": "peerLeft"}}
