"""Hostile-client budgets (docs/security.md): what a peer may ask of signalling:
pending and concurrent sessions per address and key, candidates, the ICE deadline."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SignallingLimitSettings(BaseModel):
    """What a peer may ask of signalling: sessions, candidates, the ICE deadline."""

    connect_timeout: float = Field(
        15.0,
        gt=0,
        description="Seconds after its answer a peer connection has to complete "
        "ICE and DTLS; else it is closed and its slot freed.",
    )
    max_sessions_per_address: int = Field(
        5, ge=0, description="Sessions one client address may hold at once; more: 429 (0: no cap)."
    )
    max_sessions_per_network: int = Field(
        10, ge=0, description="Sessions one /24 (IPv4) or /64 (IPv6) may hold; 429 (0: no cap)."
    )
    max_pending_per_address: int = Field(
        3,
        ge=0,
        description="Sessions still connecting plus /start ids waiting for their offer, "
        "per client address; more: 429 (0: no cap).",
    )
    max_pending_per_network: int = Field(
        6, ge=0, description="The same per /24 (IPv4) or /64 (IPv6) network (0: no cap)."
    )
    key_session_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="With two or more API keys, the share of max_sessions (and "
        "of the /start ids) one key may hold; more: 429.",
    )
    renegotiations_per_minute: float = Field(
        6.0, gt=0, description="Offers renegotiating one peer connection, per minute; then 429."
    )
    renegotiation_burst: int = Field(
        3, ge=1, description="Renegotiations one peer connection may make at once."
    )
    allow_private_candidates: Literal["auto"] | bool = Field(
        "auto",
        description="ICE candidates toward loopback and private ranges: true, false, or "
        "auto (private ones from a client on a private network, loopback ones from a client on "
        "loopback). Link-local, multicast and unspecified ones are always refused.",
    )
