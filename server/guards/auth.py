"""Optional API keys (``Authorization: Bearer <key>``) and session ownership.

With no keys configured the server is open, as a local demo wants. With keys, every
protected route requires one of them; the caller's *credential* (a fingerprint of the
key it used, never the key) is what a session remembers as its owner, so that one key
cannot touch the sessions of another.

Routers protect their routes with the dependency::

    app.include_router(router, dependencies=PROTECTED)       # or, per route:
    async def route(owner: Owner) -> ...                     # also gives the credential
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.params import Depends as DependsParam
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

# Documents the scheme in OpenAPI (the "Authorize" button of /docs); we raise our own 401.
_bearer = HTTPBearer(auto_error=False, description="One of the server's PARLEY_API_KEYS.")


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class ApiKeys:
    """The accepted keys, kept as SHA-256 digests so every comparison has the same length."""

    def __init__(self, keys: list[str]) -> None:
        self._digests = [_digest(k) for k in keys if k]

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def credential(self, token: str) -> str | None:
        """The credential of ``token``, or None when it matches no key.

        Every key is compared, in constant time, whatever matched: the time taken says
        nothing about which key (or how much of one) was right.
        """
        candidate = _digest(token)
        found: bytes | None = None
        for digest in self._digests:
            if hmac.compare_digest(candidate, digest):
                found = digest
        return None if found is None else "key:" + found.hex()[:16]


def unauthorized(error: str) -> HTTPException:
    return HTTPException(401, error, headers={"WWW-Authenticate": "Bearer"})


async def require_api_key(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str | None:
    """FastAPI dependency: the caller's credential; 401 unless it presents a valid key.

    Returns None when the server has no keys (open): every caller is then the same owner.
    """
    keys: ApiKeys | None = getattr(request.app.state, "api_keys", None)
    if keys is None or not keys.enabled:
        return None
    if bearer is None:
        raise unauthorized("an API key is required: send 'Authorization: Bearer <key>'")
    credential = keys.credential(bearer.credentials)
    if credential is None:
        raise unauthorized("the API key is not valid")
    return credential


def sees_details(request: Request) -> bool:
    """Whether the caller may see more than up or down on the status routes (``/health``,
    ``/ready``): always on an open server; with keys, only with a valid one (a wrong key
    gets 401, as elsewhere). They stay open to probes, which need no more, while what
    they would show (the database path, upstream error text, live counts) is the
    operator's."""
    keys: ApiKeys | None = getattr(request.app.state, "api_keys", None)
    if keys is None or not keys.enabled:
        return True
    header = request.headers.get("authorization")
    if header is None:
        return False
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized("send the API key as 'Authorization: Bearer <key>'")
    if keys.credential(token.strip()) is None:
        raise unauthorized("the API key is not valid")
    return True


Owner = Annotated[str | None, Depends(require_api_key)]
"""A route parameter of this type requires an API key and holds the caller's credential."""

PROTECTED: list[DependsParam] = [Depends(require_api_key)]
"""``dependencies=PROTECTED`` on a router or ``include_router`` protects all its routes."""


def owns(owner: str | None, caller: str | None) -> bool:
    """Whether ``caller`` may act on something ``owner`` created (open server: always)."""
    return owner == caller


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server to this machine (127.0.0.0/8, ::1,
    localhost). Anything else counts as reachable: every interface ("0.0.0.0", "::",
    ""), an address of a network card, or a name (it may resolve to one)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, keys: bool) -> str | None:
    """The warning for a server that anyone on the network may use, else None."""
    if keys or is_loopback(host):
        return None
    return (
        f"open server on {host or 'every interface'}: no API keys are set, so anyone who "
        "can reach it can list the calls (addresses, transcripts), end them and push "
        "messages to them. Set PARLEY_API_KEYS, or bind 127.0.0.1 (PARLEY_HOST)."
    )


def install(app: FastAPI, keys: list[str]) -> None:
    """Make ``require_api_key`` check ``keys`` for this app (empty: the app is open)."""
    app.state.api_keys = ApiKeys(keys)
