"""Where one session is in its life."""

from __future__ import annotations

from enum import StrEnum


class SessionState(StrEnum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSING = "closing"
    CLOSED = "closed"
