"""Phone calls: Twilio's voice webhook (``POST /telephony/twiml``) and the providers'
media streams (``/telephony/ws``), each stream served as a call over
:class:`server.transports.phone.PhoneTransport`.

Who may open a stream: with ``PARLEY_TWILIO_AUTH_TOKEN`` set, the webhook must carry
Twilio's valid ``X-Twilio-Signature`` (else 403), and it hands the stream a signed token
for that call, valid ``PARLEY_TELEPHONY_TOKEN_SECONDS``, which the stream's ``start``
must bring back (Twilio passes it as a custom parameter). With API keys, a stream may
instead bring a key (``Authorization: Bearer`` or ``?api_key=``): the way in for other
providers, whose own signatures we do not check. A stream with neither is refused at its
``start``, before any audio is processed. With no token and no keys the server is open,
as its other routes are.
"""

from __future__ import annotations

import asyncio
import secrets
import time

from fastapi import APIRouter, Request, Response, WebSocket
from fastapi.responses import JSONResponse

from server.api.call_sockets import client_of, refuse, serve_call, socket_credential, socket_limits
from server.session.session import Session
from server.settings import Settings
from server.telephony.detect import ProviderDetector, stream_for
from server.telephony.signature import (
    TokenError,
    check_token,
    is_valid_twilio_signature,
    issue_token,
    public_request_url,
)
from server.telephony.stream_events import ProviderStream, StreamProtocolError, StreamStarted
from server.telephony.twilio_rest import TwilioRest
from server.telephony.twiml import TOKEN_PARAMETER, TwimlError, stream_twiml
from server.transports.phone import HangUp, PhoneTransport
from server.transports.socket_call import POLICY

router = APIRouter()

# A stream must start within this long and this many messages, or it is closed unserved.
START_SECONDS = 10.0
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
    call_id = values.get("CallSid") or "call-" + secrets.token_hex(8)
    passed = {k: values[k] for k in CALL_FIELDS if values.get(k)}
    passed.update({k: v for k, v in request.query_params.items() if k != TOKEN_PARAMETER})
    token = issue_token(_secret(settings), call_id, time.time(), settings.telephony_token_seconds)
    try:
        document = stream_twiml(settings.public_url, token, passed)
    except TwimlError as exc:
        return _error(400, str(exc))
    return Response(document, media_type="application/xml")


async def _start(websocket: WebSocket) -> tuple[ProviderStream, StreamStarted]:
    """Read until the stream's start: its dialect and the start. Raises
    :class:`StreamProtocolError` (or TimeoutError) with the reason to close with."""
    chosen = websocket.query_params.get("provider")
    stream = stream_for(chosen) if chosen else None
    detector = ProviderDetector()
    async with asyncio.timeout(START_SECONDS):
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


def _admitted(websocket: WebSocket, settings: Settings, started: StreamStarted) -> str | None:
    """Why the stream may not go on (None: it may)."""
    allowed, owner = socket_credential(websocket)
    needs_token = bool(settings.twilio_auth_token.get_secret_value())
    if owner is not None or (allowed and not needs_token):
        return None
    token = started.parameters.get(TOKEN_PARAMETER) or websocket.query_params.get("token")
    if not token:
        return "a stream token (from /telephony/twiml) or an API key is required"
    try:
        call_id = check_token(_secret(settings), token, time.time())
    except TokenError as exc:
        return str(exc)
    if started.call_id and call_id != started.call_id:
        return "the stream token was issued for another call"
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
    await websocket.accept()
    settings: Settings = websocket.app.state.registry.settings
    try:
        stream, started = await _start(websocket)
    except (StreamProtocolError, TimeoutError) as exc:
        await refuse(websocket, POLICY, str(exc) or "no start in time")
        return
    refused = _admitted(websocket, settings, started)
    if refused is not None:
        await refuse(websocket, POLICY, refused)
        return
    limits = socket_limits(settings)
    hang_up = _hang_up(settings, stream.provider)
    _, owner = socket_credential(websocket)
    parameters = {k: v for k, v in started.parameters.items() if k != TOKEN_PARAMETER}
    request_data = {"provider": stream.provider, "call_id": started.call_id,
                    "stream_id": started.stream_id, "parameters": parameters}  # fmt: skip

    def greet(session: Session) -> None:
        session.greet()  # a phone has no client-ready: the call is connected

    await serve_call(
        websocket,
        client_of(websocket, owner, stream.provider),
        lambda _, hooks: PhoneTransport(websocket, hooks, limits, stream, started, hang_up),
        request_data=request_data,
        on_open=greet,
        address_caps=False,  # every call comes from the provider's few addresses
    )
