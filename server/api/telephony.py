"""Phone calls: Twilio's voice webhook (``POST /telephony/twiml``) and the providers'
media streams (``/telephony/ws``), each stream served as a call over
:class:`server.transports.phone.PhoneTransport`.

Who may open a stream: with ``PARLEY_TWILIO_AUTH_TOKEN`` set, the webhook must carry
Twilio's valid ``X-Twilio-Signature`` (else 403), is answered once per call (a replay
gets 409), and hands the stream a signed token for that call, valid
``PARLEY_TELEPHONY_TOKEN_SECONDS`` and good for one stream, which the stream's ``start``
must bring back (Twilio passes it as a custom parameter). With API keys, a stream may
instead bring a key (``Authorization: Bearer`` or ``?api_key=``): the way in for other
providers, whose own signatures we do not check. The rules, and what is checked before
the upgrade: :mod:`server.api.phone_admission`. With no token and no keys the server is
open, as its other routes are.

Phone streams are held to the per-address caps as any client is, except those from
``PARLEY_TELEPHONY_TRUSTED_NETWORKS`` (a provider's media servers carry every call).
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time

from fastapi import APIRouter, Request, Response, WebSocket
from fastapi.responses import JSONResponse
from loguru import logger
from starlette.websockets import WebSocketDisconnect

from server.api.call_sockets import client_of, deny, refuse, serve_call, socket_limits
from server.api.phone_admission import Admitted, PhoneGuards, admit, refusal_before_upgrade
from server.session.session import Session
from server.settings import Settings
from server.telephony.detect import ProviderDetector, stream_for
from server.telephony.json_messages import MAX_ID
from server.telephony.signature import is_valid_twilio_signature, issue_token, public_request_url
from server.telephony.stream_events import ProviderStream, StreamProtocolError, StreamStarted
from server.telephony.twilio_rest import TwilioRest
from server.telephony.twiml import TOKEN_PARAMETER, TwimlError, stream_twiml
from server.transports.phone import HangUp, PhoneTransport
from server.transports.socket_call import POLICY

router = APIRouter()

# A stream must start within this many messages (and PARLEY_TELEPHONY_START_SECONDS), or
# it is closed unserved.
START_MESSAGES = 5
# What Twilio's webhook posts is a few hundred bytes of form.
MAX_WEBHOOK_BYTES = 16 * 1024
# The webhook's fields passed on to the stream (and so to the session's request data).
CALL_FIELDS = ("CallSid", "From", "To", "Direction", "CallerName")
# Signs stream tokens when there is no Twilio auth token to sign them with (one replica).
_PROCESS_SECRET = secrets.token_urlsafe(32)


def _secret(settings: Settings) -> str:
    return settings.twilio_auth_token.get_secret_value() or _PROCESS_SECRET


def _error(status: int, error: str) -> JSONResponse:
    return JSONResponse({"error": error}, status_code=status)


@router.post("/telephony/twiml")
async def twiml(request: Request) -> Response:
    """Twilio's voice webhook: TwiML connecting the call to our media stream."""
    settings: Settings = request.app.state.registry.settings
    if not settings.public_url:
        return _error(503, "phone calls are off: set PARLEY_PUBLIC_URL to the public base URL")
    if int(request.headers.get("content-length") or 0) > MAX_WEBHOOK_BYTES:
        return _error(413, f"a webhook over {MAX_WEBHOOK_BYTES} bytes")
    form = await request.form(max_files=0, max_fields=200)
    fields = [(k, v) for k, v in form.multi_items() if isinstance(v, str)]
    auth_token = settings.twilio_auth_token.get_secret_value()
    keys = getattr(request.app.state, "api_keys", None)
    if not auth_token and keys is not None and keys.enabled:
        # A protected server must not hand stream tokens to whoever asks.
        return _error(403, "with API keys on, the webhook needs PARLEY_TWILIO_AUTH_TOKEN set "
                      "to check X-Twilio-Signature")  # fmt: skip
    if auth_token:
        url = public_request_url(settings.public_url, "/telephony/twiml", request.url.query)
        signature = request.headers.get("x-twilio-signature", "")
        if not is_valid_twilio_signature(auth_token, url, fields, signature):
            return _error(403, "X-Twilio-Signature missing or not Twilio's for this request")
    values = dict(fields)
    call_sid = values.get("CallSid", "")
    if len(call_sid) > MAX_ID or not call_sid.isascii() or not call_sid.isprintable():
        return _error(400, f"CallSid must be printable ASCII of at most {MAX_ID} characters")
    signature = request.headers.get("x-twilio-signature", "")
    key = call_sid or hashlib.sha256(signature.encode()).hexdigest()
    if (call_sid or auth_token) and not request.app.state.phone_guards.answer_webhook(key):
        return _error(409, "this call's webhook was answered already: a replay mints no token")
    call_id = call_sid or "call-" + secrets.token_hex(8)
    passed = {k: values[k] for k in CALL_FIELDS if values.get(k)}
    passed.update({k: v for k, v in request.query_params.items() if k != TOKEN_PARAMETER})
    token = issue_token(_secret(settings), call_id, time.time(), settings.telephony_token_seconds)
    try:
        document = stream_twiml(settings.public_url, token, passed)
    except TwimlError as exc:
        return _error(400, str(exc))
    return Response(document, media_type="application/xml")


async def _start(websocket: WebSocket, seconds: float) -> tuple[ProviderStream, StreamStarted]:
    """Read until the stream's start: its dialect and the start. Raises
    :class:`StreamProtocolError` (or TimeoutError) with the reason to close with."""
    chosen = websocket.query_params.get("provider")
    stream = stream_for(chosen) if chosen else None
    detector = ProviderDetector()
    async with asyncio.timeout(seconds):
        for _ in range(START_MESSAGES):
            event = await websocket.receive()
            if event["type"] == "websocket.disconnect":
                raise StreamProtocolError("the stream ended before its start")
            message = event.get("text")
            message = message if message is not None else event.get("bytes") or b""
            stream = stream or detector.feed(message)
            started = stream.parse(message) if stream is not None else None
            if stream is not None and isinstance(started, StreamStarted):
                return stream, started
    raise StreamProtocolError(f"no start in the first {START_MESSAGES} messages")


async def _read_start(
    websocket: WebSocket, settings: Settings
) -> tuple[ProviderStream, StreamStarted] | None:
    """The stream's start, or None once it has been refused (or has gone)."""
    try:
        return await _start(websocket, settings.telephony_start_seconds)
    except WebSocketDisconnect:
        return None
    except (StreamProtocolError, TimeoutError) as exc:
        reason = str(exc) or "no start in time"
    except Exception as exc:  # client input must never end as a traceback
        logger.warning("phone stream: its start could not be read: {!r}", exc)
        reason = "the start could not be read"
    await refuse(websocket, POLICY, reason)
    return None


def _hang_up(settings: Settings, provider: str) -> HangUp | None:
    token = settings.twilio_auth_token.get_secret_value()
    if provider != "twilio" or not (settings.twilio_account_sid and token):
        return None
    sid, url = settings.twilio_account_sid, settings.twilio_api_url

    async def hang_up(call_id: str) -> None:
        rest = TwilioRest(sid, token, url)
        try:
            await rest.hang_up(call_id)
        finally:
            await rest.aclose()

    return hang_up


@router.websocket("/telephony/ws")
async def phone_stream(websocket: WebSocket) -> None:
    """A provider's media stream, served as a phone call."""
    settings: Settings = websocket.app.state.registry.settings
    refused = refusal_before_upgrade(websocket, settings, _secret(settings))
    if refused is not None:
        await deny(websocket, 401, refused)
        return
    await websocket.accept()
    begun = await _read_start(websocket, settings)
    if begun is None:
        return
    stream, started = begun
    guards: PhoneGuards = websocket.app.state.phone_guards
    admitted = admit(websocket, settings, guards, started, _secret(settings))
    if isinstance(admitted, str):
        await refuse(websocket, POLICY, admitted)
        return
    await _serve_stream(websocket, settings, guards, stream, started, admitted)


async def _serve_stream(
    websocket: WebSocket,
    settings: Settings,
    guards: PhoneGuards,
    stream: ProviderStream,
    started: StreamStarted,
    admitted: Admitted,
) -> None:
    live = guards.live
    call = (admitted.scope, stream.provider, started.call_id)
    if started.call_id and call in live:
        await refuse(websocket, POLICY, "a stream for this call is live already")
        return
    limits = socket_limits(settings)
    # Only a call id a signed webhook vouched for is ever hung up at the provider.
    hang_up = _hang_up(settings, stream.provider) if admitted.verified_call else None
    parameters = {k: v for k, v in started.parameters.items() if k != TOKEN_PARAMETER}
    request_data = {"provider": stream.provider, "call_id": started.call_id,
                    "stream_id": started.stream_id, "parameters": parameters}  # fmt: skip
    client = client_of(websocket, admitted.owner, stream.provider)

    def greet(session: Session) -> None:
        session.greet()  # a phone has no client-ready: the call is connected

    if started.call_id:
        live.add(call)
    try:
        await serve_call(
            websocket,
            client,
            lambda _, hooks: PhoneTransport(websocket, hooks, limits, stream, started, hang_up),
            request_data=request_data,
            on_open=greet,
            # A provider's media servers carry every call from a few addresses.
            address_caps=(client.remote_addr or "") not in guards.providers,
        )
    finally:
        live.discard(call)
