"""The live sessions of this server: capacity, lookup, liveness, shutdown."""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from loguru import logger

from server.api.auth import owns
from server.api.rate_limit import KeyedRateLimiter
from server.ops.heap import release_memory
from server.rtvi.handler import ClientMessageHandler
from server.rtvi.ui_worker import UIEventHandler
from server.session.services import Services
from server.session.session import Session
from server.settings import Settings
from server.storage.store import ClientInfo, TranscriptStore

# /start records waiting for an offer, at most this many per session slot.
STARTS_PER_SLOT = 4
# Seconds after the last session closed before memory is given back.
COLLECT_DELAY = 0.5


class CapacityError(Exception):
    """All ``max_sessions`` slots are taken."""


class ShuttingDown(CapacityError):
    """The server is draining: it takes no new session (a 503, like a full server)."""


@dataclass
class StartRecord:
    """A ``POST /start`` session id, waiting for (or bound to) its peer connection."""

    session_id: str
    request_data: Any
    created: float = field(default_factory=time.monotonic)
    pc_id: str | None = None
    owner: str | None = None


def new_id(prefix: str = "") -> str:
    """An unguessable identifier for sessions and peer connections, after ``prefix.``
    when given (the replica that owns it; the random part never contains a dot)."""
    token = secrets.token_urlsafe(16)
    return f"{prefix}.{token}" if prefix else token


class SessionListener(Protocol):
    """Told of every session's start and end (metrics, transcripts)."""

    def session_opened(self, session: Session) -> None: ...

    def session_closed(self, session: Session) -> None: ...


class SessionRegistry:
    """Owns every session; a closed session leaves the registry as it finishes closing."""

    def __init__(
        self,
        settings: Settings,
        services: Services,
        handlers: dict[str, ClientMessageHandler],
        store: TranscriptStore | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.services = services
        self.handlers = handlers
        # App handlers for ui-event messages, by event name (server/rtvi/ui_worker.py).
        self.ui_event_handlers: dict[str, UIEventHandler] = {}
        self.sessions: dict[str, Session] = {}
        self.starts: dict[str, StartRecord] = {}
        self.total_created = 0
        self.listeners: list[SessionListener] = []
        self.draining = False
        # New sessions per client address (POST /start and fresh offers).
        self.new_session_rate: KeyedRateLimiter | None = (
            KeyedRateLimiter(settings.session_rate_per_minute / 60.0, settings.session_burst)
            if settings.session_rate_per_minute > 0
            else None
        )

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, pc_id: str) -> Session | None:
        return self.sessions.get(pc_id)

    def get_owned(self, pc_id: str, owner: str | None) -> Session | None:
        """The session ``pc_id`` if ``owner`` created it; another's looks unknown."""
        session = self.sessions.get(pc_id)
        return session if session is not None and owns(session.owner, owner) else None

    def create(
        self,
        client: ClientInfo,
        request_data: Any = None,
        pc_id: str | None = None,
        start: StartRecord | None = None,
        owner: str | None = None,
    ) -> Session:
        """A new session under ``pc_id`` (or a fresh id); raises CapacityError when full."""
        if self.draining:
            raise ShuttingDown("the server is shutting down")
        if len(self.sessions) >= self.settings.max_sessions:
            raise CapacityError(f"all {self.settings.max_sessions} session slots are in use")
        pc_id = pc_id or new_id(self.settings.replica_id)
        session = Session(
            pc_id,
            self.settings,
            self.services,
            self.handlers,
            client,
            request_data=request_data,
            start_id=start.session_id if start else None,
            on_closed=self._remove,
            store=self.store,
            owner=owner,
            ui_event_handlers=self.ui_event_handlers,
        )
        if start is not None:
            start.pc_id = pc_id
        self.sessions[pc_id] = session
        self.total_created += 1
        for listener in self.listeners:
            listener.session_opened(session)
        return session

    def _remove(self, session: Session) -> None:
        if self.sessions.get(session.pc_id) is session:
            del self.sessions[session.pc_id]
            if not self.sessions:
                # Soon, once the closing session's own frames have let go of it.
                asyncio.get_running_loop().call_later(COLLECT_DELAY, self._collect_if_idle)
        if session.start_id and session.start_id in self.starts:
            record = self.starts[session.start_id]
            if record.pc_id == session.pc_id and session.close_reason != "restart":
                del self.starts[session.start_id]
        for listener in self.listeners:
            listener.session_closed(session)

    def _collect_if_idle(self) -> None:
        """With no call left nothing streams: a good moment to give memory back."""
        if not self.sessions:
            release_memory()

    async def close(self, pc_id: str, reason: str) -> bool:
        """Close one session and wait for it; False when there is no such session."""
        session = self.sessions.get(pc_id)
        if session is None:
            return False
        await session.close(reason)
        return True

    async def close_all(self, reason: str, error: str | None = None) -> None:
        """Close every session; ``error`` is told to each client as a fatal RTVI error."""
        sessions = list(self.sessions.values())
        await asyncio.gather(*(s.close(reason, error) for s in sessions), return_exceptions=True)
        # And any close task still finishing (request_close: liveness, hang-ups).
        await asyncio.gather(*Session.closing, return_exceptions=True)

    # -- /start ----------------------------------------------------------------------

    def start(self, request_data: Any, owner: str | None = None) -> StartRecord:
        """Register a ``POST /start`` session id; raises CapacityError when too many wait."""
        if self.draining:
            raise ShuttingDown("the server is shutting down")
        self.expire_starts()
        if len(self.starts) >= STARTS_PER_SLOT * self.settings.max_sessions:
            raise CapacityError("too many sessions are waiting for an offer")
        record = StartRecord(
            session_id=new_id(self.settings.replica_id), request_data=request_data, owner=owner
        )
        self.starts[record.session_id] = record
        return record

    def expire_starts(self) -> None:
        """Forget /start ids that never got an offer in time."""
        deadline = time.monotonic() - self.settings.start_ttl
        for sid, record in list(self.starts.items()):
            if record.pc_id is None and record.created < deadline:
                del self.starts[sid]

    # -- liveness ----------------------------------------------------------------------

    async def watch_liveness(self) -> None:
        """Close sessions that have sent neither pings nor media for ``liveness_timeout``."""
        timeout = self.settings.liveness_timeout
        period = min(1.0, timeout / 4)
        last = time.monotonic()
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            stalled, last = now - last > period + 1.0, now
            if stalled:
                # The event loop was blocked (e.g. a model loading): media and pings are
                # still waiting to be read, so silence now proves nothing.
                continue
            self._close_silent(now, timeout)
            self.expire_starts()

    def _close_silent(self, now: float, timeout: float) -> None:
        # A function of its own: a loop variable in watch_liveness's frame would keep the
        # last session checked (and its peer connection) alive while the server idles.
        for session in list(self.sessions.values()):
            if now - session.last_activity > timeout:
                logger.bind(session=session.pc_id).info(
                    "session {}: no sign of life for {:.1f} s", session.pc_id, timeout
                )
                session.request_close("liveness lost")
