"""Hostile-client budgets (docs/security.md): what a peer may do over the data
channel and SCTP: buffered bytes, message sizes, channels."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ChannelLimitSettings(BaseModel):
    """What a peer may do over the data channel and SCTP."""

    max_buffered_bytes: int = Field(
        1048576,
        ge=65536,
        description="Bytes queued toward a client's data channel, unsent or unacknowledged: "
        "past half, audio levels and metrics are dropped and replies withheld; past all, closed.",
    )
    max_data_channels: int = Field(
        4, ge=1, le=1000, description="Data channels a peer may open; more are closed (RTVI error)."
    )
    sctp_receive_buffer_bytes: int = Field(
        1048576,
        ge=327680,
        description="Bytes of unfinished data-channel messages a peer may leave with the server "
        "(above the 256 KB max-message-size advertised); past it, the association is aborted.",
    )
    sctp_stall_seconds: float = Field(
        20.0, gt=0, description="A peer that acknowledges nothing sent to it this long is closed."
    )
    sctp_max_retransmissions: int = Field(
        10, ge=1, description="Retransmission timeouts in a row before a peer is closed (RFC 4960)."
    )
