"""The live sessions of this server: capacity, lookup, liveness, shutdown."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from loguru import logger

from server.memory import release_memory
from server.rtvi_handler import ClientMessageHandler
from server.services import Services
from server.sessions import (
    CapacityError,
    ClientInfo,
    Session,
    StartRecord,
    new_id,
)
from server.settings import Settings

# /start records waiting for an offer, at most this many per session slot.
STARTS_PER_SLOT = 4
# Seconds after the last session closed before memory is given back.
COLLECT_DELAY = 0.5


class SessionRegistry:
    """Owns every session; a closed session leaves the registry as it finishes closing."""

    def __init__(
        self,
        settings: Settings,
        services: Services,
        handlers: dict[str, ClientMessageHandler],
    ) -> None:
        self.settings = settings
        self.services = services
        self.handlers = handlers
        self.sessions: dict[str, Session] = {}
        self.starts: dict[str, StartRecord] = {}
        self.total_created = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, pc_id: str) -> Session | None:
        return self.sessions.get(pc_id)

    def create(
        self,
        client: ClientInfo,
        request_data: Any = None,
        pc_id: str | None = None,
        start: StartRecord | None = None,
    ) -> Session:
        """A new session under ``pc_id`` (or a fresh id); raises CapacityError when full."""
        if len(self.sessions) >= self.settings.max_sessions:
            raise CapacityError(f"all {self.settings.max_sessions} session slots are in use")
        pc_id = pc_id or new_id()
        session = Session(
            pc_id,
            self.settings,
            self.services,
            self.handlers,
            client,
            request_data=request_data,
            start_id=start.session_id if start else None,
            on_closed=self._remove,
        )
        if start is not None:
            start.pc_id = pc_id
        self.sessions[pc_id] = session
        self.total_created += 1
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

    async def close_all(self, reason: str) -> None:
        sessions = list(self.sessions.values())
        await asyncio.gather(*(s.close(reason) for s in sessions), return_exceptions=True)

    # -- /start ----------------------------------------------------------------------

    def start(self, request_data: Any) -> StartRecord:
        """Register a ``POST /start`` session id; raises CapacityError when too many wait."""
        self.expire_starts()
        if len(self.starts) >= STARTS_PER_SLOT * self.settings.max_sessions:
            raise CapacityError("too many sessions are waiting for an offer")
        record = StartRecord(session_id=new_id(), request_data=request_data)
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
                logger.info("session {}: no sign of life for {:.1f} s", session.pc_id, timeout)
                session.request_close("liveness lost")
