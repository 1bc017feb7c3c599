"""The live sessions of this server: capacity, lookup, liveness, shutdown.

Capacity is shared, so it is also divided: one client may not hold every slot. Per
client address, per network (its /24 or /64: rotating addresses stay in one) and per API
key (when there are several), the sessions held and those *pending* (a peer connection
still connecting, a ``/start`` id still waiting for its offer) are capped; past a cap
the client gets a 429 while everyone else still gets in. A pending session is cheap to
make and costs a slot: a peer connection that has not completed ICE and DTLS
``connect_timeout`` seconds after its answer is closed, however often it is touched.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from loguru import logger

from server.guards.auth import owns
from server.guards.rate_limit import KeyedRateLimiter, client_keys
from server.process.heap import release_memory
from server.rtvi.handler import ClientMessageHandler
from server.rtvi.ui_worker import UIEventHandler
from server.session.model_services import Services
from server.session.params import SessionEnv, SessionOrigin
from server.session.session import Session, SessionState
from server.settings import Settings
from server.storage.store import ClientInfo, TranscriptStore
from server.transports.base import TransportFactory
from server.transports.webrtc import WebRTCTransport

# /start records waiting for an offer, at most this many per session slot.
STARTS_PER_SLOT = 4
# Seconds after the last session closed before memory is given back.
COLLECT_DELAY = 0.5
# What the pending caps count, as a refusal names it.
PENDING = "sessions connecting or waiting for an offer"


class CapacityError(Exception):
    """All ``max_sessions`` slots are taken."""


class ShuttingDown(CapacityError):
    """The server is draining: it takes no new session (a 503, like a full server)."""


class ClientLimitError(Exception):
    """One client (address, network or API key) holds all it may: a 429, not a full server."""


def _cap(held: int, limit: int | None, what: str) -> None:
    """Raise ClientLimitError when ``held`` reached ``limit`` (0 or None: no cap)."""
    if limit and held >= limit:
        raise ClientLimitError(f"too many {what} (limit {limit})")


@dataclass
class StartRecord:
    """A ``POST /start`` session id, waiting for (or bound to) its peer connection."""

    session_id: str
    request_data: Any
    created: float = field(default_factory=time.monotonic)
    pc_id: str | None = None
    owner: str | None = None
    address: str | None = None  # the client's, for the per-client caps


@dataclass
class PeerBudget:
    """What one peer connection has used of its signalling budget."""

    candidates: int = 0  # PATCH items, and the distinct candidates of its offers
    named: set[tuple[str, int, str]] = field(default_factory=set)  # already counted
    connect_by: float | None = None  # monotonic: complete ICE and DTLS by then, or close

    def charge(self, new: list[tuple[str, int, str]]) -> None:
        """Count candidates not counted before (``new``)."""
        self.candidates += len(new)
        self.named.update(new)


@dataclass
class Held:
    """What one client holds: sessions, and of them and the /start ids, those pending."""

    sessions: int = 0
    pending: int = 0
    starts: int = 0


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
        self.budgets: dict[str, PeerBudget] = {}  # by pc_id, as long as the session lives
        self.total_created = 0
        self.listeners: list[SessionListener] = []
        self.draining = False
        # New sessions per client address (POST /start and fresh offers).
        self.new_session_rate: KeyedRateLimiter | None = (
            KeyedRateLimiter(settings.session_rate_per_minute / 60.0, settings.session_burst)
            if settings.session_rate_per_minute > 0
            else None
        )
        # Offers on a known pc_id: each makes aiortc re-read the SDP and its candidates.
        self.renegotiation_rate = KeyedRateLimiter(
            settings.renegotiations_per_minute / 60.0, settings.renegotiation_burst
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
        transport: TransportFactory = WebRTCTransport,
        address_caps: bool = True,
    ) -> Session:
        """A new session under ``pc_id`` (or a fresh id) over ``transport`` (WebRTC unless
        told); raises CapacityError when full. ``address_caps=False``: the per-address and
        per-network caps do not apply (a phone call comes from its provider's servers, which
        carry every caller's call; the key's cap still does)."""
        if self.draining:
            raise ShuttingDown("the server is shutting down")
        if len(self.sessions) >= self.settings.max_sessions:
            raise CapacityError(f"all {self.settings.max_sessions} session slots are in use")
        self._check_session_caps(client.remote_addr, owner, start, address_caps)
        pc_id = pc_id or new_id(self.settings.replica_id)
        env = SessionEnv(
            self.settings, self.services, self.handlers, self.store, self.ui_event_handlers
        )
        start_id = start.session_id if start else None
        origin = SessionOrigin(client, request_data, start_id, owner)
        session = Session(pc_id, env, origin, on_closed=self._remove, transport=transport)
        if start is not None:
            start.pc_id = pc_id
        self.sessions[pc_id] = session
        self.budgets[pc_id] = PeerBudget()
        self.total_created += 1
        for listener in self.listeners:
            listener.session_opened(session)
        return session

    def _remove(self, session: Session) -> None:
        if self.sessions.get(session.pc_id) is session:
            del self.sessions[session.pc_id]
            self.budgets.pop(session.pc_id, None)
            self.renegotiation_rate.forget(session.pc_id)
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

    def start(
        self, request_data: Any, owner: str | None = None, address: str | None = None
    ) -> StartRecord:
        """Register a ``POST /start`` session id; raises CapacityError when too many wait,
        ClientLimitError when this client (``address``, ``owner``) holds too many."""
        if self.draining:
            raise ShuttingDown("the server is shutting down")
        self.expire_starts()
        if len(self.starts) >= STARTS_PER_SLOT * self.settings.max_sessions:
            raise CapacityError("too many sessions are waiting for an offer")
        self._check_start_caps(address, owner)
        record = StartRecord(
            session_id=new_id(self.settings.replica_id),
            request_data=request_data,
            owner=owner,
            address=address,
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
            self._close_unconnected(now)
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

    # -- a peer connection's budget and deadline ---------------------------------------------

    def budget(self, session: Session) -> PeerBudget:
        """The signalling budget of ``session``'s peer connection."""
        return self.budgets.setdefault(session.pc_id, PeerBudget())

    def answered(self, session: Session) -> None:
        """A new peer connection got its answer: it has ``connect_timeout`` to connect."""
        budget = self.budget(session)
        if budget.connect_by is None:
            budget.connect_by = time.monotonic() + self.settings.connect_timeout

    def _close_unconnected(self, now: float) -> None:
        for pc_id, budget in list(self.budgets.items()):
            session = self.sessions.get(pc_id)
            due = budget.connect_by
            if session is None or due is None or now < due:
                continue
            if session.state == SessionState.CONNECTING:
                timeout = self.settings.connect_timeout
                logger.bind(session=pc_id).info(
                    "session {}: not connected {:g} s after its answer", pc_id, timeout
                )
                session.request_close("never connected")
            budget.connect_by = None  # connected (or closing): checked once

    # -- per-client caps ----------------------------------------------------------------

    def held(
        self, address: str | None, owner: str | None, skip: StartRecord | None = None
    ) -> dict[str, Held]:
        """What the client at ``address`` holds per ``address``, ``network`` and ``key``,
        the /start id ``skip`` left out. Sessions with no credential count as one key of
        their own: with keys on, those are the phone calls a stream token let in, which
        then have a key's share and no more."""
        mine, network = client_keys(address)
        held = {"address": Held(), "network": Held(), "key": Held()}

        def count(addr: str | None, key: str | None, pending: bool, session: bool) -> None:
            theirs, their_network = client_keys(addr)
            scopes = (theirs == mine, their_network == network, key == owner)
            for scope, hit in zip(held.values(), scopes, strict=True):
                if hit:
                    scope.sessions += session
                    scope.starts += not session
                    scope.pending += pending

        for session in self.sessions.values():
            connecting = session.state == SessionState.CONNECTING
            count(session.client.remote_addr, session.owner, connecting, True)
        for record in self.starts.values():
            if record.pc_id is None and record is not skip:
                count(record.address, record.owner, True, False)
        return held

    def _key_cap(self, of: int) -> int | None:
        """A key's share of ``of`` when several keys divide the server, else None."""
        if len(self.settings.api_keys) < 2:
            return None  # one key is everyone's: its cap is the server's
        return max(1, int(self.settings.key_session_share * of))

    def _check_session_caps(
        self, address: str | None, owner: str | None, start: StartRecord | None,
        address_caps: bool = True,
    ) -> None:  # fmt: skip
        held = self.held(address, owner, skip=start)  # the /start id becomes this session
        s = self.settings
        if address_caps:
            self._check_address_caps(held)
        whose = "for this API key" if owner is not None else "without a key (stream tokens)"
        _cap(held["key"].sessions, self._key_cap(s.max_sessions), f"sessions {whose}")

    def _check_address_caps(self, held: dict[str, Held]) -> None:
        s = self.settings
        _cap(held["address"].sessions, s.max_sessions_per_address, "sessions from this address")
        _cap(held["network"].sessions, s.max_sessions_per_network, "sessions from this network")
        _cap(held["address"].pending, s.max_pending_per_address, PENDING + " from this address")
        _cap(held["network"].pending, s.max_pending_per_network, PENDING + " from this network")

    def _check_start_caps(self, address: str | None, owner: str | None) -> None:
        held = self.held(address, owner)
        s = self.settings
        _cap(held["address"].pending, s.max_pending_per_address, PENDING + " from this address")
        _cap(held["network"].pending, s.max_pending_per_network, PENDING + " from this network")
        starts = self._key_cap(STARTS_PER_SLOT * s.max_sessions)
        _cap(held["key"].starts, starts, "sessions waiting for an offer for this API key")
