"""Who may open a phone stream, and as what: checked before the upgrade where the request
itself carries the credential, else at the stream's ``start``.

- **An API key** (``Authorization: Bearer`` or ``?api_key=``): the stream is that key's,
  held to its share of the server; the call id it names is its own word, so ending the
  session never hangs up a call at the provider.
- **A stream token** (``?token=``, or the ``token`` parameter Twilio passes from the
  webhook's TwiML): used once, for the call it was issued for, which the start must name;
  that call id came from a signed webhook, so it may be hung up through the REST API.
- **Neither**, on a server with no keys and no Twilio auth token: open, as its other
  routes are.

Whatever admitted it, one live stream per call: a second stream naming a live call id is
refused. A signed webhook is answered once per call: a replay mints no second token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from starlette.websockets import WebSocket

from server.api.call_sockets import socket_credential
from server.api.slow_clients import TrustedProxies
from server.guards.auth import ApiKeys
from server.guards.once import UsedOnce
from server.settings import Settings
from server.telephony.signature import TokenError, check_token
from server.telephony.stream_events import StreamStarted
from server.telephony.twiml import TOKEN_PARAMETER

# How long an answered webhook is remembered: far past any call's setup, so a replay of
# an old one mints nothing either.
WEBHOOK_MEMORY_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class Admitted:
    """A stream let in: whose it is (``owner``, a key's credential or None), the call id
    it was admitted for by a token (``verified_call``: the only id ever hung up), and the
    scope its call id is unique in."""

    owner: str | None
    verified_call: str | None
    scope: str


class PhoneGuards:
    """What the phone routes of one server remember: tokens used, webhooks answered, and
    the live streams by call; and the providers' networks, exempt from per-address caps."""

    def __init__(self, settings: Settings) -> None:
        self.providers = TrustedProxies(settings.telephony_trusted_networks)
        self.tokens = UsedOnce()
        self.webhooks = UsedOnce()
        self.live: set[tuple[str, str, str]] = set()  # (scope, provider, call id)

    def answer_webhook(self, key: str) -> bool:
        """Whether a webhook (its CallSid, or its signature) is answered for the first time."""
        return self.webhooks.use(key, time.time() + WEBHOOK_MEMORY_SECONDS)


def _keys(websocket: WebSocket) -> ApiKeys | None:
    keys: ApiKeys | None = getattr(websocket.app.state, "api_keys", None)
    return keys if keys is not None and keys.enabled else None


def _needs_credential(websocket: WebSocket, settings: Settings) -> bool:
    return _keys(websocket) is not None or bool(settings.twilio_auth_token.get_secret_value())


def _presents_key(websocket: WebSocket) -> bool:
    header = websocket.headers.get("authorization", "")
    return header.lower().startswith("bearer ") or "api_key" in websocket.query_params


def refusal_before_upgrade(websocket: WebSocket, settings: Settings, secret: str) -> str | None:
    """Why the stream is refused from its request alone (None: it may open, and may still
    be refused at its start)."""
    if _presents_key(websocket) and _keys(websocket) is not None:
        allowed, _ = socket_credential(websocket)
        return None if allowed else "the API key is not valid"
    token = websocket.query_params.get(TOKEN_PARAMETER)
    if token:
        try:
            check_token(secret, token, time.time())
        except TokenError as exc:
            return str(exc)
        return None
    if _keys(websocket) is not None and not settings.twilio_auth_token.get_secret_value():
        # No webhook issues tokens on such a server (it answers 403): only a key can do.
        return "an API key is required: 'Authorization: Bearer <key>' or ?api_key="
    return None


def admit(
    websocket: WebSocket,
    settings: Settings,
    guards: PhoneGuards,
    started: StreamStarted,
    secret: str,
) -> Admitted | str:
    """The stream's admission, or why it is refused, once its start is read."""
    allowed, owner = socket_credential(websocket)
    if owner is not None:
        return Admitted(owner, None, owner)
    token = started.parameters.get(TOKEN_PARAMETER) or websocket.query_params.get(TOKEN_PARAMETER)
    if not token:
        if allowed and not _needs_credential(websocket, settings):
            return Admitted(None, None, "open")
        return "a stream token (from /telephony/twiml) or an API key is required"
    try:
        call_id = check_token(secret, token, time.time())
    except TokenError as exc:
        return str(exc)
    if not started.call_id:
        return "a stream admitted by its token must name its call in its start"
    if call_id != started.call_id:
        return "the stream token was issued for another call"
    if not guards.tokens.use(token, time.time() + settings.telephony_token_seconds):
        return "the stream token was used already"
    return Admitted(None, call_id, "token")
