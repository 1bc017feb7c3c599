"""HTTP signalling: SDP offer/answer, trickled ICE candidates, and ``/start`` sessions.

The routes follow what Pipecat's SmallWebRTC client sends (see PROTOCOL.md): 4xx for
input that will never work (the client gives up at once), 503 with ``Retry-After`` when
the server is full (the client retries), 429 with ``Retry-After`` when this client holds
or asks too much (see :mod:`server.session.registry`).

An offer is checked and its candidates screened (:mod:`server.media.sdp_guard`) before
aiortc sees it; the candidates of offers and PATCHes share one budget per peer
connection, and what was dropped is said in the answer (``candidates_dropped``,
``detail``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Annotated, Any, Literal

from aiortc import RTCSessionDescription
from aiortc.sdp import candidate_from_sdp
from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, model_validator

from server.api.retry_after import retry_later, unavailable
from server.guards.auth import Owner, owns
from server.guards.client_json import check_depth
from server.media import sdp_guard
from server.media.channel_signalling import MAX_RECEIVERS
from server.media.sdp_guard import CandidatePolicy, Screened
from server.session.registry import (
    CapacityError,
    ClientLimitError,
    PeerBudget,
    SessionRegistry,
    StartRecord,
)
from server.session.session import OfferError, Session
from server.settings import IceServer, Settings
from server.storage.store import ClientInfo

router = APIRouter(tags=["signalling"])

# App data a client sends with a session; kept with it and listed by GET /api/sessions,
# so nested no deeper than the listing can serialize (server/guards/client_json.py).
AppData = Annotated[Any, AfterValidator(check_depth)]


class OfferRequest(BaseModel):
    """An SDP offer; with a known ``pc_id`` it renegotiates that peer connection."""

    model_config = ConfigDict(extra="ignore")

    sdp: str = Field(description="The client's SDP offer.")
    type: Literal["offer"] = "offer"
    pc_id: str | None = Field(None, description="A previous answer's pc_id, to renegotiate.")
    restart_pc: bool = Field(False, description="Replace the peer connection under pc_id.")
    request_data: AppData = Field(
        None,
        validation_alias=AliasChoices("requestData", "request_data"),
        description="App data for the session (kept with it; at most 32 levels deep).",
    )


class AnswerResponse(BaseModel):
    sdp: str
    type: Literal["answer"] = "answer"
    pc_id: str
    candidates_dropped: int = Field(0, description="Offered candidates refused (see detail).")
    detail: str | None = Field(None, description="Why candidates were dropped, if any were.")


class Candidate(BaseModel):
    """One trickled candidate; an empty ``candidate`` means end of candidates."""

    candidate: str
    sdp_mid: str | None = None
    sdp_mline_index: int | None = None


class CandidatesRequest(BaseModel):
    pc_id: str
    candidates: list[Candidate] = Field(description="At most PARLEY_MAX_CANDIDATES; 413 past it.")


class StatusResponse(BaseModel):
    status: Literal["success"] = "success"
    candidates_dropped: int = Field(0, description="Candidates refused (see detail).")
    detail: str | None = Field(None, description="Why candidates were dropped, if any were.")


class IceConfig(BaseModel):
    iceServers: list[IceServer]


class StartRequest(BaseModel):
    """``POST /start``: reserves a session id for a later offer.

    The official client posts its ``requestData`` as the body itself; a body with a
    ``requestData`` (or ``request_data``/``body``) field is read from that field instead.
    """

    model_config = ConfigDict(extra="allow")

    transport: str | None = None
    enableDefaultIceServers: bool = False
    request_data: AppData = Field(
        None, validation_alias=AliasChoices("requestData", "request_data", "body")
    )

    @model_validator(mode="after")
    def _shallow_extra(self) -> StartRequest:
        check_depth(self.model_extra)  # the body itself may be the app's data
        return self

    def app_data(self) -> Any:
        """The app's data for the session, wherever the client put it."""
        if self.request_data is not None:
            return self.request_data
        return self.model_extra or None


class StartResponse(BaseModel):
    sessionId: str
    iceConfig: IceConfig


class ErrorBody(BaseModel):
    """Every error answer has this shape."""

    error: str
    detail: Any = None


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 404, 413, 422, 429, 503, 504)
}


async def get_registry(request: Request) -> SessionRegistry:
    # async: FastAPI would run a plain function in a worker thread, for every request.
    return request.app.state.registry


Registry = Annotated[SessionRegistry, Depends(get_registry)]


# Media sections an offer may have: a browser sends 2 or 3 (audio, camera, screen); each
# costs a transceiver, so thousands of them would be a cheap way to load the server.
MAX_MEDIA_SECTIONS = MAX_RECEIVERS


def screen(registry: SessionRegistry, request: Request, sdp: str) -> Screened:
    """The offer checked (400 for SDP we cannot answer), without the candidates this
    client may not name, before aiortc parses it."""
    settings = registry.settings
    try:
        lines = sdp_guard.check_offer(sdp, settings.max_sdp_bytes, MAX_MEDIA_SECTIONS)
        return sdp_guard.screen_offer(sdp, lines, candidate_policy(settings, request))
    except sdp_guard.SdpRefused as exc:
        raise HTTPException(exc.status, str(exc)) from None


def client_host(request: Request) -> str | None:
    return request.client.host if request.client else None


def candidate_policy(settings: Settings, request: Request) -> CandidatePolicy:
    return CandidatePolicy.for_client(settings.allow_private_candidates, client_host(request))


def too_many_candidates(limit: int) -> HTTPException:
    return HTTPException(413, f"too many candidates for one peer connection (limit {limit})")


def new_candidates(budget: PeerBudget, offer: Screened, limit: int) -> list[tuple[str, int, str]]:
    """The offer's candidates not yet counted for this peer connection (a renegotiation
    repeats its candidates: aioice ignores those, so they cost nothing); 413 when they
    do not fit in its budget."""
    new = [address for address in offer.named if address not in budget.named]
    if budget.candidates + len(new) > limit:
        raise too_many_candidates(limit)
    return new


def check_new_session_rate(registry: SessionRegistry, request: Request) -> None:
    """429 with ``Retry-After`` when this client address opens sessions too fast."""
    limiter = registry.new_session_rate
    if limiter is None:
        return
    wait = limiter.take(client_host(request) or "unknown")
    if wait > 0:
        per_minute = f"{registry.settings.session_rate_per_minute:g}"
        raise retry_later(
            429, f"too many new sessions from this address (limit {per_minute} per minute)", wait
        )


def check_renegotiation_rate(registry: SessionRegistry, session: Session) -> None:
    """429 with ``Retry-After`` when one peer connection renegotiates too often."""
    wait = registry.renegotiation_rate.take(session.pc_id)
    if wait > 0:
        limit = f"limit {registry.settings.renegotiations_per_minute:g} per minute"
        raise retry_later(429, f"too many renegotiations of this peer connection ({limit})", wait)


def client_info(request: Request, owner: str | None) -> ClientInfo:
    return ClientInfo(
        remote_addr=client_host(request),
        user_agent=request.headers.get("user-agent"),
        credential=owner,
    )


async def open_session(
    registry: SessionRegistry,
    body: OfferRequest,
    request: Request,
    owner: str | None,
    start: StartRecord | None,
    replaced: Session | None,
    offer: Screened,
) -> Session:
    """A new session for this offer (``replaced``, restarted, closed first); refusals:
    503 full or draining, 429 this client holds or opens too many, 413 candidates."""
    settings = registry.settings
    if registry.draining:  # before a restart closes the old peer connection
        raise unavailable("the server is shutting down", settings)
    if not (start is not None and start.pc_id is None):
        check_new_session_rate(registry, request)  # a /start's first offer was counted there
    new = new_candidates(PeerBudget(), offer, settings.max_session_candidates)
    restarted = replaced.pc_id if replaced is not None else None
    if replaced is not None:
        await replaced.close("restart")
    request_data = body.request_data
    if request_data is None and start is not None:
        request_data = start.request_data
    try:
        session = registry.create(
            client_info(request, owner),
            request_data=request_data,
            pc_id=restarted,  # never an id the client made up
            start=start,
            owner=owner,
        )
    except CapacityError as exc:
        raise unavailable(str(exc), settings) from None
    except ClientLimitError as exc:
        raise retry_later(429, str(exc), settings.retry_after) from None
    registry.budget(session).charge(new)
    return session


async def negotiate(
    registry: SessionRegistry, session: Session, sdp: str, fresh: bool
) -> RTCSessionDescription:
    """The answer to ``sdp``; a fresh session that cannot answer is closed."""
    try:
        async with asyncio.timeout(registry.settings.offer_timeout):
            return await session.negotiate(sdp, "offer")
    except OfferError as exc:
        if fresh:
            await session.close("offer refused")
        raise HTTPException(400, str(exc)) from None
    except TimeoutError:
        await session.close("offer timed out")
        raise HTTPException(504, "answering the offer timed out") from None
    except BaseException:
        if fresh:
            await session.close("offer failed")
        raise


async def handle_offer(
    registry: SessionRegistry,
    body: OfferRequest,
    request: Request,
    owner: str | None,
    start_id: str | None = None,
) -> AnswerResponse:
    offer = screen(registry, request, body.sdp)
    start = registry.starts.get(start_id) if start_id else None
    if start_id and (start is None or not owns(start.owner, owner)):
        raise HTTPException(404, f"unknown session id {start_id!r}")
    # Another credential's pc_id is treated as unknown: a new session with a new id.
    session = registry.get_owned(body.pc_id, owner) if body.pc_id else None
    if session is not None and start is not None and session.start_id != start.session_id:
        raise HTTPException(404, f"pc_id {body.pc_id!r} does not belong to this session")
    fresh = session is None or body.restart_pc
    if fresh:
        session = await open_session(registry, body, request, owner, start, session, offer)
    else:
        assert session is not None
        check_renegotiation_rate(registry, session)
        budget = registry.budget(session)
        budget.charge(new_candidates(budget, offer, registry.settings.max_session_candidates))
    answer = await negotiate(registry, session, offer.sdp, fresh)
    if fresh:
        registry.answered(session)  # from now on it has connect_timeout to connect
    return AnswerResponse(
        sdp=answer.sdp,
        pc_id=session.pc_id,
        candidates_dropped=sum(offer.refused.values()),
        detail=offer.note(),
    )


async def handle_candidates(
    registry: SessionRegistry,
    body: CandidatesRequest,
    request: Request,
    owner: str | None,
    start_id: str | None = None,
) -> StatusResponse:
    session = registry.get_owned(body.pc_id, owner)
    if session is None or (start_id is not None and session.start_id != start_id):
        raise HTTPException(404, f"unknown pc_id {body.pc_id!r}")
    settings = registry.settings
    if len(body.candidates) > settings.max_candidates:
        raise HTTPException(
            413, f"too many candidates: {len(body.candidates)} (limit {settings.max_candidates})"
        )
    budget = registry.budget(session)
    if budget.candidates + len(body.candidates) > settings.max_session_candidates:
        raise too_many_candidates(settings.max_session_candidates)
    budget.candidates += len(body.candidates)  # every item: each is work, whatever it says
    policy = candidate_policy(settings, request)
    refused: Counter[str] = Counter()
    for item in body.candidates:
        text = item.candidate.strip().removeprefix("candidate:")
        if not text:
            await session.add_candidate(None)
            continue
        try:
            candidate = candidate_from_sdp(text)
        except Exception:
            raise HTTPException(400, f"invalid ICE candidate: {item.candidate[:120]!r}") from None
        reason = policy.refusal(candidate.ip, candidate.port)
        if reason is not None:
            refused[reason] += 1
            continue
        budget.named.add((candidate.ip, candidate.port, candidate.protocol.lower()))
        candidate.sdpMid = item.sdp_mid
        candidate.sdpMLineIndex = item.sdp_mline_index
        if candidate.sdpMid is None and candidate.sdpMLineIndex is None:
            candidate.sdpMLineIndex = 0
        await session.add_candidate(candidate)
    session.touch()
    return StatusResponse(
        candidates_dropped=sum(refused.values()), detail=sdp_guard.refusal_note(refused)
    )


@router.post("/api/offer", response_model=AnswerResponse, responses=ERRORS)
async def post_offer(
    body: OfferRequest, request: Request, registry: Registry, owner: Owner
) -> AnswerResponse:
    """Answer an SDP offer (after ICE gathering); renegotiate or restart a known pc_id."""
    return await handle_offer(registry, body, request, owner)


@router.patch("/api/offer", response_model=StatusResponse, responses=ERRORS)
async def patch_offer(
    body: CandidatesRequest, request: Request, registry: Registry, owner: Owner
) -> StatusResponse:
    """Add trickled ICE candidates to a peer connection."""
    return await handle_candidates(registry, body, request, owner)


@router.post("/start", response_model=StartResponse, responses=ERRORS)
async def start(
    request: Request, registry: Registry, owner: Owner, body: StartRequest | None = None
) -> StartResponse:
    """Reserve a session id; the client then offers at /sessions/{sessionId}/api/offer."""
    body = body or StartRequest()
    check_new_session_rate(registry, request)
    try:
        record = registry.start(body.app_data(), owner=owner, address=client_host(request))
    except CapacityError as exc:
        raise unavailable(str(exc), registry.settings) from None
    except ClientLimitError as exc:
        raise retry_later(429, str(exc), registry.settings.retry_after) from None
    return StartResponse(
        sessionId=record.session_id, iceConfig=IceConfig(iceServers=registry.settings.ice_servers)
    )


@router.post("/sessions/{session_id}/api/offer", response_model=AnswerResponse, responses=ERRORS)
async def post_session_offer(
    session_id: str, body: OfferRequest, request: Request, registry: Registry, owner: Owner
) -> AnswerResponse:
    """``POST /api/offer`` for a session made by ``/start``."""
    return await handle_offer(registry, body, request, owner, start_id=session_id)


@router.patch("/sessions/{session_id}/api/offer", response_model=StatusResponse, responses=ERRORS)
async def patch_session_offer(
    session_id: str, body: CandidatesRequest, request: Request, registry: Registry, owner: Owner
) -> StatusResponse:
    """``PATCH /api/offer`` for a session made by ``/start``."""
    return await handle_candidates(registry, body, request, owner, start_id=session_id)
