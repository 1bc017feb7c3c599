"""HTTP signalling: SDP offer/answer, trickled ICE candidates, and ``/start`` sessions.

The routes follow what Pipecat's SmallWebRTC client sends (see PROTOCOL.md): 4xx for
input that will never work (the client gives up at once), 503 with ``Retry-After`` when
the server is full (the client retries).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from aiortc.sdp import candidate_from_sdp
from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from server.registry import SessionRegistry
from server.sessions import CapacityError, ClientInfo, OfferError, Session
from server.settings import IceServer

router = APIRouter(tags=["signalling"])


class OfferRequest(BaseModel):
    """An SDP offer; with a known ``pc_id`` it renegotiates that peer connection."""

    model_config = ConfigDict(extra="ignore")

    sdp: str = Field(description="The client's SDP offer.")
    type: Literal["offer"] = "offer"
    pc_id: str | None = Field(None, description="A previous answer's pc_id, to renegotiate.")
    restart_pc: bool = Field(False, description="Replace the peer connection under pc_id.")
    request_data: Any = Field(
        None,
        validation_alias=AliasChoices("requestData", "request_data"),
        description="App data for the session (kept with it).",
    )


class AnswerResponse(BaseModel):
    sdp: str
    type: Literal["answer"] = "answer"
    pc_id: str


class Candidate(BaseModel):
    """One trickled candidate; an empty ``candidate`` means end of candidates."""

    candidate: str
    sdp_mid: str | None = None
    sdp_mline_index: int | None = None


class CandidatesRequest(BaseModel):
    pc_id: str
    candidates: list[Candidate] = Field(max_length=64)


class StatusResponse(BaseModel):
    status: Literal["success"] = "success"


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
    request_data: Any = Field(
        None, validation_alias=AliasChoices("requestData", "request_data", "body")
    )

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
    code: {"model": ErrorBody} for code in (400, 404, 413, 422, 503, 504)
}


async def get_registry(request: Request) -> SessionRegistry:
    # async: FastAPI would run a plain function in a worker thread, for every request.
    return request.app.state.registry


Registry = Annotated[SessionRegistry, Depends(get_registry)]


def check_sdp(sdp: str) -> None:
    """Refuse SDP that is plainly not an offer we can answer, before aiortc parses it."""
    if not sdp.lstrip().startswith("v=0"):
        raise HTTPException(400, "the SDP must start with v=0")
    if "\nm=audio " not in sdp.replace("\r\n", "\n"):
        raise HTTPException(400, "the SDP offer has no audio m-line")


def client_info(request: Request) -> ClientInfo:
    return ClientInfo(
        remote_addr=request.client.host if request.client else None,
        user_agent=request.headers.get("user-agent"),
    )


async def handle_offer(
    registry: SessionRegistry, body: OfferRequest, request: Request, start_id: str | None = None
) -> AnswerResponse:
    check_sdp(body.sdp)
    start = registry.starts.get(start_id) if start_id else None
    if start_id and start is None:
        raise HTTPException(404, f"unknown session id {start_id!r}")
    session: Session | None = registry.get(body.pc_id) if body.pc_id else None
    if session is not None and start is not None and session.start_id != start.session_id:
        raise HTTPException(404, f"pc_id {body.pc_id!r} does not belong to this session")
    fresh = session is None or body.restart_pc
    if session is not None and body.restart_pc:
        await session.close("restart")
    if fresh:
        request_data = body.request_data
        if request_data is None and start is not None:
            request_data = start.request_data
        try:
            session = registry.create(
                client_info(request),
                request_data=request_data,
                pc_id=body.pc_id if body.restart_pc else None,
                start=start,
            )
        except CapacityError as exc:
            retry = str(registry.settings.retry_after)
            raise HTTPException(503, str(exc), headers={"Retry-After": retry}) from None
    assert session is not None
    try:
        async with asyncio.timeout(registry.settings.offer_timeout):
            answer = await session.negotiate(body.sdp, body.type)
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
    return AnswerResponse(sdp=answer.sdp, pc_id=session.pc_id)


async def handle_candidates(
    registry: SessionRegistry, body: CandidatesRequest, start_id: str | None = None
) -> StatusResponse:
    session = registry.get(body.pc_id)
    if session is None or (start_id is not None and session.start_id != start_id):
        raise HTTPException(404, f"unknown pc_id {body.pc_id!r}")
    for item in body.candidates:
        text = item.candidate.strip().removeprefix("candidate:")
        if not text:
            await session.add_candidate(None)
            continue
        try:
            candidate = candidate_from_sdp(text)
        except Exception:
            raise HTTPException(400, f"invalid ICE candidate: {item.candidate[:120]!r}") from None
        candidate.sdpMid = item.sdp_mid
        candidate.sdpMLineIndex = item.sdp_mline_index
        if candidate.sdpMid is None and candidate.sdpMLineIndex is None:
            candidate.sdpMLineIndex = 0
        await session.add_candidate(candidate)
    session.touch()
    return StatusResponse()


@router.post("/api/offer", response_model=AnswerResponse, responses=ERRORS)
async def post_offer(body: OfferRequest, request: Request, registry: Registry) -> AnswerResponse:
    """Answer an SDP offer (after ICE gathering); renegotiate or restart a known pc_id."""
    return await handle_offer(registry, body, request)


@router.patch("/api/offer", response_model=StatusResponse, responses=ERRORS)
async def patch_offer(body: CandidatesRequest, registry: Registry) -> StatusResponse:
    """Add trickled ICE candidates to a peer connection."""
    return await handle_candidates(registry, body)


@router.post("/start", response_model=StartResponse, responses=ERRORS)
async def start(registry: Registry, body: StartRequest | None = None) -> StartResponse:
    """Reserve a session id; the client then offers at /sessions/{sessionId}/api/offer."""
    body = body or StartRequest()
    try:
        record = registry.start(body.app_data())
    except CapacityError as exc:
        retry = str(registry.settings.retry_after)
        raise HTTPException(503, str(exc), headers={"Retry-After": retry}) from None
    return StartResponse(
        sessionId=record.session_id, iceConfig=IceConfig(iceServers=registry.settings.ice_servers)
    )


@router.post("/sessions/{session_id}/api/offer", response_model=AnswerResponse, responses=ERRORS)
async def post_session_offer(
    session_id: str, body: OfferRequest, request: Request, registry: Registry
) -> AnswerResponse:
    """``POST /api/offer`` for a session made by ``/start``."""
    return await handle_offer(registry, body, request, start_id=session_id)


@router.patch("/sessions/{session_id}/api/offer", response_model=StatusResponse, responses=ERRORS)
async def patch_session_offer(
    session_id: str, body: CandidatesRequest, registry: Registry
) -> StatusResponse:
    """``PATCH /api/offer`` for a session made by ``/start``."""
    return await handle_candidates(registry, body, start_id=session_id)
