"""Hostile-client budgets (docs/security.md): what a peer may send as media and
HTTP: packet rates, slow requests, hosts, and whose forwarded addresses are believed."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field
from pydantic_settings import NoDecode

from server.settings.lists import split_list


def networks(entries: list[str]) -> list[str]:
    """Each entry an address or a network (CIDR), or ``*``: what uvicorn can match."""
    for entry in entries:
        if entry != "*":
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"not an address or a network: {entry!r}") from None
    return entries


# A list of addresses or networks from the environment (JSON or comma-separated).
NetworkList = Annotated[list[str], NoDecode, BeforeValidator(split_list), AfterValidator(networks)]


def _hosts(entries: list[str]) -> list[str]:
    """Host names, lower case, without port or trailing dot."""
    return [entry.strip().lower().rstrip(".") for entry in entries if entry.strip()]


class MediaLimitSettings(BaseModel):
    """What a peer may send as media and HTTP: packet rates, slow requests, hosts."""

    audio_packet_rate: float = Field(
        60.0,
        gt=0,
        description="Inbound audio RTP packets per second a session may send (20 ms Opus: "
        "50/s); the excess is dropped before decoding and the client told once.",
    )
    audio_packet_burst: int = Field(
        250,
        ge=1,
        description="Audio packets a session may send at once over the rate: the backlog a "
        "stall leaves (the network's, or this server's loop under load; 250 is five seconds "
        "of 20 ms packets), taken without a drop.",
    )
    http_request_timeout: float = Field(
        10.0,
        gt=0,
        description="Seconds a client has to send a whole HTTP request (head and body) once "
        "connected or after the previous answer; then 408 and the connection is closed.",
    )
    http_max_connections: int = Field(
        1000,
        ge=1,
        description="Open HTTP connections in all; past it a new one replaces the oldest "
        "still sending its request, or gets 503 when none is.",
    )
    http_max_connections_per_address: int = Field(
        64,
        ge=1,
        description="Open HTTP connections one client address may hold (trusted proxies "
        "excepted); more get 429 and are closed.",
    )
    ws_max_unsent_bytes: int = Field(
        262144,
        ge=65536,
        le=16777216,
        description="Bytes a WebSocket may leave waiting toward its peer (pongs and closes "
        "included; the call's own messages are bounded by max_buffered_bytes before "
        "they get here); past it the peer is not reading and the connection is aborted.",
    )
    ws_close_seconds: float = Field(
        5.0,
        gt=0,
        le=60,
        description="Seconds a WebSocket peer has to finish a close once the server has "
        "closed (its close frame answered, what was unsent taken); then it is aborted.",
    )
    allowed_hosts: Annotated[
        list[str], NoDecode, BeforeValidator(split_list), AfterValidator(_hosts)
    ] = Field(
        default_factory=list,
        description="Host header names answered (DNS-rebinding guard), JSON list or "
        "comma-separated; '*.example.com' for subdomains, '*' for any; IP literals always "
        "pass. Empty: localhost names and the bound host on loopback, any name otherwise.",
    )
    trusted_proxies: NetworkList = Field(
        default_factory=list,
        description="Addresses or networks (CIDR) of proxies whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed, JSON list or comma-separated. Empty: nobody's.",
    )
