"""Calls over a WebSocket: the plain PCM route (``/ws``) and what the phone routes share
with it: who may open one, the session opened through the registry like any other call
(its capacity, per-client caps, drain), served until either side ends it.

A missing or wrong API key is refused before the upgrade, with an HTTP 401 and a JSON
body (:func:`deny`): a client with no key costs no WebSocket. Later refusals are
WebSocket closes with a reason: 1008 (policy: a wrong stream token, a protocol error),
1013 (try again later: full, draining, too many from this client), 1009 (a message too
large).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse
from loguru import logger
from starlette.websockets import WebSocketDisconnect

from server.guards.auth import ApiKeys
from server.guards.rate_limit import TokenBucket
from server.media.inbound_audio import PacketGate
from server.session.registry import CapacityError, ClientLimitError, SessionRegistry
from server.session.session import Session
from server.settings import Settings
from server.storage.store import ClientInfo
from server.transports.base import TransportHooks
from server.transports.pcm_socket import PcmSocketTransport
from server.transports.socket_call import POLICY, TRY_LATER, SocketLimits, SocketTransport

router = APIRouter()

# Makes the call's transport once the session's hooks exist.
SocketFactory = Callable[[Settings, TransportHooks], SocketTransport]


def socket_limits(settings: Settings) -> SocketLimits:
    """One call's bounds from the settings (see :class:`SocketLimits`)."""
    return SocketLimits(
        audio=PacketGate(settings.audio_packet_rate, settings.audio_packet_burst),
        messages=TokenBucket(settings.phone_message_rate, settings.phone_message_burst),
        max_message=settings.ws_max_message_bytes,
        max_backlog=settings.max_buffered_bytes,
    )


def socket_credential(websocket: WebSocket) -> tuple[bool, str | None]:
    """Whether the caller may open a call, and its credential: an API key as
    ``Authorization: Bearer <key>`` or, for clients that cannot set headers, the
    ``api_key`` query parameter. Open when the server has no keys."""
    keys: ApiKeys | None = getattr(websocket.app.state, "api_keys", None)
    if keys is None or not keys.enabled:
        return True, None
    header = websocket.headers.get("authorization", "")
    token = header[7:] if header.lower().startswith("bearer ") else None
    token = token or websocket.query_params.get("api_key")
    credential = keys.credential(token) if token else None
    return credential is not None, credential


async def refuse(websocket: WebSocket, code: int, reason: str) -> None:
    """Close an accepted WebSocket with ``reason`` (trimmed to a close frame's 123 bytes);
    a client already gone is no error."""
    logger.info("WebSocket call refused ({}): {}", code, reason)
    try:
        await websocket.close(code, reason.encode()[:123].decode(errors="ignore"))
    except (WebSocketDisconnect, OSError, RuntimeError):
        pass  # it left first (RuntimeError: Starlette's word for a socket already closed)


async def deny(websocket: WebSocket, status: int, error: str) -> None:
    """Refuse the upgrade itself: an HTTP ``status`` with the app's JSON error body (a
    server without the ASGI denial extension gets the close after the handshake)."""
    if "websocket.http.response" not in websocket.scope.get("extensions", {}):
        await websocket.accept()
        await refuse(websocket, POLICY, error)
        return
    logger.info("WebSocket upgrade refused ({}): {}", status, error)
    body = {"error": error, "detail": None}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    try:
        await websocket.send_denial_response(JSONResponse(body, status, headers=headers))
    except (WebSocketDisconnect, OSError, RuntimeError):
        pass


def client_of(websocket: WebSocket, owner: str | None, library: str) -> ClientInfo:
    return ClientInfo(
        remote_addr=websocket.client.host if websocket.client else None,
        user_agent=websocket.headers.get("user-agent"),
        library=library,
        credential=owner,
    )


async def serve_call(
    websocket: WebSocket,
    client: ClientInfo,
    factory: SocketFactory,
    request_data: object = None,
    first: list[str | bytes] | None = None,
    on_open: Callable[[Session], None] | None = None,
    address_caps: bool = True,
) -> Session | None:
    """Open a session over ``factory``'s transport and serve it to its end (None: refused)."""
    registry: SessionRegistry = websocket.app.state.registry
    try:
        session = registry.create(
            client, request_data=request_data, owner=client.credential, transport=factory,
            address_caps=address_caps,
        )  # fmt: skip
    except (CapacityError, ClientLimitError) as exc:
        await refuse(websocket, TRY_LATER, str(exc))
        return None
    transport = session.transport
    assert isinstance(transport, SocketTransport)
    try:
        if on_open is not None:
            on_open(session)
        await transport.run(first)
    finally:
        session.request_close(transport.close_reason or "the client hung up")
        await session.closed.wait()
    return session


@router.websocket("/ws")
async def pcm_call(websocket: WebSocket) -> None:
    """A call over plain PCM and RTVI JSON (:mod:`server.transports.pcm_socket`)."""
    allowed, owner = socket_credential(websocket)
    if not allowed:
        presented = websocket.headers.get("authorization") or "api_key" in websocket.query_params
        missing = "an API key is required: 'Authorization: Bearer <key>' or ?api_key="
        await deny(websocket, 401, "the API key is not valid" if presented else missing)
        return
    await websocket.accept()
    settings: Settings = websocket.app.state.registry.settings
    limits = socket_limits(settings)
    await serve_call(
        websocket,
        client_of(websocket, owner, "websocket"),
        lambda _, hooks: PcmSocketTransport(websocket, hooks, limits),
    )
