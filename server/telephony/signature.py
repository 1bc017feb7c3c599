"""Who may talk to the phone routes: Twilio's webhook signatures, and the signed tokens
that let a call open its media stream.

Webhooks (https://www.twilio.com/docs/usage/webhooks/webhooks-security): Twilio sends
``X-Twilio-Signature``, the base64 HMAC-SHA1, keyed by the account's auth token, of the
full URL it requested (query string included) followed by every POST parameter's name and
value, sorted by name, with no separators. As Twilio's own helper (twilio-python's
``request_validator.py``) does, a repeated name's values are sorted and counted once, and
the URL is accepted with its port and without it (Twilio has signed both ways). The URL is
the one Twilio requested, before any proxy: build it from the public URL
(:func:`public_request_url`), never from what a proxy forwarded (http, 127.0.0.1, :7860).

Stream tokens: the webhook that answers a call issues one for its CallSid
(:func:`issue_token`); the stream presents it (a ``<Stream>`` ``<Parameter>``, see
:mod:`server.telephony.twiml`) and :func:`check_token` gives the CallSid back, which must be
the stream's own. ``base64url(call_id).expiry_ms.base64url(HMAC-SHA256)``, stdlib only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import re
from collections.abc import Iterable, Mapping
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

SIGNATURE_HEADER = "X-Twilio-Signature"

Params = Mapping[str, str] | Iterable[tuple[str, str]]
"""POST parameters: a dict, or pairs (Starlette's ``form.multi_items()`` keeps repeats)."""

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Derived from the secret, not the secret itself: the auth token then signs nothing else the
# way it signs stream tokens.
_TOKEN_LABEL = b"parley/telephony/stream-token/v1"
_MAX_CALL_ID = 128  # bytes of UTF-8; Twilio's CallSid is 34 characters
_TOKEN = re.compile(r"([A-Za-z0-9_-]{1,171})\.([0-9]{1,16})\.([A-Za-z0-9_-]{43})")
_MAX_TOKEN = 171 + 1 + 16 + 1 + 43


def public_request_url(public_url: str, path: str, query: str = "") -> str:
    """The URL Twilio requested: the public base URL (``https://host[/prefix]``), then the
    route's ``path`` and the request's raw ``query`` string (as received, still encoded)."""
    url = public_url.rstrip("/") + "/" + path.lstrip("/")
    return f"{url}?{query}" if query else url


def twilio_signature(auth_token: str, url: str, params: Params = ()) -> str:
    """The ``X-Twilio-Signature`` Twilio sends for a request to ``url`` with ``params``."""
    if not auth_token:
        raise ValueError("no auth token: an empty HMAC key signs for anyone")
    pairs = params.items() if isinstance(params, Mapping) else params
    data = url + "".join(name + value for name, value in sorted(set(pairs)))
    digest = hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def is_valid_twilio_signature(auth_token: str, url: str, params: Params, signature: str) -> bool:
    """Whether ``signature`` (the header) is Twilio's for ``url`` and ``params``, compared
    in constant time; ``url`` with and without its port, as Twilio's helper accepts."""
    if not auth_token:
        raise ValueError("no auth token: an empty HMAC key signs for anyone")
    if not signature:
        return False
    pairs = list(params.items() if isinstance(params, Mapping) else params)
    given = signature.encode("utf-8", "replace")
    results = [
        hmac.compare_digest(twilio_signature(auth_token, candidate, pairs).encode(), given)
        for candidate in _url_variants(url)
    ]
    return any(results)


def _url_variants(url: str) -> list[str]:
    """``url`` as given, without its port, and with its scheme's default port."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return [url]
    netloc = parts.netloc
    found = [url]
    if port is not None:
        found.append(urlunsplit(parts._replace(netloc=netloc.rsplit(":", 1)[0])))
    elif parts.scheme in _DEFAULT_PORTS:
        found.append(urlunsplit(parts._replace(netloc=f"{netloc}:{_DEFAULT_PORTS[parts.scheme]}")))
    return found


class TokenError(ValueError):
    """A stream token refused: ``reason`` is ``"malformed"``, ``"bad signature"`` or
    ``"expired"`` (the message says more; it holds nothing secret)."""

    def __init__(self, reason: Literal["malformed", "bad signature", "expired"], detail: str):
        super().__init__(f"stream token {reason}: {detail}")
        self.reason = reason


def issue_token(secret: str, call_id: str, now: float, ttl: float) -> str:
    """A URL-safe token for ``call_id``, valid ``ttl`` seconds from ``now`` (wall clock,
    ``time.time()``: another replica may check it)."""
    if not 0 < len(call_id.encode()) <= _MAX_CALL_ID:
        raise ValueError(f"a stream token needs a call id of 1 to {_MAX_CALL_ID} bytes")
    if not (math.isfinite(ttl) and ttl > 0 and math.isfinite(now)):
        raise ValueError(f"a stream token needs a positive ttl and a finite now, not {ttl}")
    expires_ms = math.ceil((now + ttl) * 1000)
    body = f"{_b64(call_id.encode())}.{expires_ms}"
    return f"{body}.{_mac(secret, body)}"


def check_token(secret: str, token: str, now: float) -> str:
    """The call id ``token`` was issued for; :class:`TokenError` if it is malformed, not
    signed with ``secret`` or past its expiry at ``now``."""
    _require(secret)  # before the token is read: a server misconfigured, not a bad token
    if not math.isfinite(now):
        raise ValueError(f"now must be a finite time, not {now}")  # NaN would never expire
    match = _TOKEN.fullmatch(token) if len(token) <= _MAX_TOKEN else None
    if match is None:
        raise TokenError("malformed", "not <call>.<expiry>.<signature>")
    call_b64, expires, mac = match.groups()
    if not hmac.compare_digest(_mac(secret, f"{call_b64}.{expires}"), mac):
        raise TokenError("bad signature", "not issued with this secret, or altered")
    if now * 1000 >= int(expires):
        raise TokenError("expired", f"{now - int(expires) / 1000:.1f} s ago")
    try:
        return base64.urlsafe_b64decode(call_b64 + "=" * (-len(call_b64) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise TokenError("malformed", "the call id does not decode") from None


def _require(secret: str) -> None:
    if not secret:
        raise ValueError("no secret: stream tokens are signed with twilio_auth_token")


def _mac(secret: str, body: str) -> str:
    _require(secret)
    key = hmac.new(secret.encode(), _TOKEN_LABEL, hashlib.sha256).digest()
    return _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
