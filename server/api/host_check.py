"""The ``Host`` header check: a guard against DNS rebinding.

A page on ``http://rebind.attacker.example:7860`` whose name the attacker then points at
127.0.0.1 is, to the browser, same-origin with that name: its scripts can call a Parley
server on the visitor's own machine (open by default: no keys on loopback) and read the
answers, calls and transcripts included. CORS does not stop it, the Host header does:
the request still says ``rebind.attacker.example``. So requests are answered only for the
names the server is known by (``PARLEY_ALLOWED_HOSTS``), and refused with 400 otherwise.

By default (an empty list) a server bound to loopback answers to names nobody outside can
point at an address, and only those: single-label names (``localhost``, a test client's
``testserver``), ``*.localhost`` and ``*.test`` (RFC 6761: never in public DNS; the
second is for tests) and the name it is bound to. One bound
elsewhere, or behind a proxy (``PARLEY_TRUSTED_PROXIES`` set: the proxy passes on the
public names it answers to), answers to any name (its public names are not known here:
list them to turn the check on). IP literals always pass (an address cannot be rebound,
and probes and proxies use them), as does a request without ``Host`` (no browser sends
one).
"""

from __future__ import annotations

import ipaddress

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from server.guards.auth import is_loopback

# What no public DNS record can point at an address (with single-label names).
SPECIAL_USE = ("localhost", "*.localhost", "*.test")
SINGLE_LABEL = "<single-label>"  # the pattern of a name without a dot


def allowed_hosts(configured: list[str], bound_host: str, proxied: bool = False) -> list[str]:
    """The patterns to check against: ``configured``, or the default for ``bound_host``
    (``proxied``: behind trusted proxies)."""
    if configured:
        return configured
    if is_loopback(bound_host) and not proxied:
        return [SINGLE_LABEL, *SPECIAL_USE, bound_host.strip().strip("[]").lower()]
    return ["*"]


def host_name(header: str) -> str:
    """The name in a Host header, without its port, lower case, no trailing dot."""
    name = header.strip().lower()
    if name.startswith("["):  # [v6]:port
        return name[1 : name.find("]")] if "]" in name else name
    return name.rsplit(":", 1)[0].rstrip(".") if name.count(":") == 1 else name.rstrip(".")


def is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def matches(name: str, pattern: str) -> bool:
    """``*`` matches any name; ``*.example.com`` (or ``.example.com``) its subdomains."""
    if pattern == "*" or name == pattern:
        return True
    if pattern == SINGLE_LABEL:
        return "." not in name
    suffix = pattern[1:] if pattern.startswith("*.") else pattern
    return suffix.startswith(".") and name.endswith(suffix)


class HostCheck:
    """ASGI middleware: 400 ``{"error", "detail"}`` for a Host the server does not answer."""

    def __init__(self, app: ASGIApp, allowed: list[str]) -> None:
        self.app = app
        self.allowed = allowed
        self.anything = "*" in allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.anything:
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope["headers"] if k == b"host"), None)
        if header is None or self.admits(header.decode("latin-1")):
            await self.app(scope, receive, send)
            return
        shown = header.decode("latin-1")[:100]
        body = {
            "error": "this server does not answer to that host name",
            "detail": f"Host {shown!r} is not in PARLEY_ALLOWED_HOSTS",
        }
        await JSONResponse(body, status_code=400)(scope, receive, send)

    def admits(self, header: str) -> bool:
        name = host_name(header)
        return is_address(name) or any(matches(name, p) for p in self.allowed)
