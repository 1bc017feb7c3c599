"""How the server runs: its address and logs, shutdown, capacity and liveness, peer
connections (ICE servers, inbound jitter), HTTP bodies, replicas, the models' preload and
the browser client's folder."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


class IceServer(BaseModel):
    """One STUN or TURN server, in the browser's ``RTCIceServer`` shape."""

    urls: list[str] | str
    username: str | None = None
    credential: str | None = None


class ProcessSettings(BaseModel):
    """The server process, its HTTP endpoint and its peer connections."""

    host: str = Field(
        "127.0.0.1",
        description="Address the HTTP server binds to. Loopback by default: an open server "
        "(no api_keys) lets anyone who reaches it read and end every call. 0.0.0.0: every "
        "interface (the container image sets it).",
    )
    port: int = Field(7860, ge=0, le=65535, description="HTTP port.")
    log_level: Literal["TRACE", "DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_json: bool = Field(
        False,
        description="Log one JSON object per line (time, level, message, logger, session, "
        "...) instead of text; uvicorn's and aiortc's lines too.",
    )
    trace_text: bool = Field(
        False,
        description="Put what was said (the user's and the bot's words, tools' arguments and "
        "results) in the OpenTelemetry spans' attributes. Off by default: transcripts are "
        "personal data, and a tracing backend is rarely where they are meant to be kept. "
        "Tracing itself is on only when OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) "
        "is set.",
    )
    shutdown_grace_seconds: float = Field(
        8.0,
        ge=0,
        description="On SIGTERM, how long running sessions may go on before they are closed "
        "(new ones get 503 meanwhile). Keep it below the container runtime's stop timeout "
        "(Docker: 10 s) minus a few seconds for closing.",
    )
    ice_servers: list[IceServer] = Field(
        default_factory=list,
        description="STUN/TURN servers for the peer connection and for /start's iceConfig. "
        'JSON, e.g. [{"urls": ["turn:turn.example:3478"], "username": "u", "credential": "p"}]. '
        "Empty by default: no public STUN server is assumed reachable.",
    )
    audio_jitter_frames: int = Field(
        1,
        ge=1,
        le=15,
        description="How far out of order an inbound audio packet (20 ms) may arrive and "
        "still be used, counting itself: a gap in the sequence waits for this many packets "
        "minus one before it is concealed as lost. 1: every packet is decoded the moment it "
        "arrives, and a reordered one is dropped. Raise it on networks that reorder packets "
        "(each step is up to 20 ms of latency, only when a packet is missing).",
    )
    audio_dtx: bool = Field(
        True,
        description="Send the bot's silence as Opus DTX, as browsers can: 200 ms of it, then "
        "a packet every 400 ms instead of 50 a second (receivers play silence between). "
        "Sending is most of what a silent frame costs the server. false: every 20 ms frame "
        "is sent, for a client that takes missing packets for loss.",
    )
    max_sessions: int = Field(20, ge=1, description="Concurrent peer connections; more get 503.")
    liveness_timeout: float = Field(
        10.0, gt=0, description="Seconds without a ping or inbound media before a peer is gone."
    )
    offer_timeout: float = Field(
        15.0, gt=0, description="Seconds an offer may take to answer (ICE gathering included)."
    )
    start_ttl: float = Field(
        120.0, gt=0, description="Seconds a /start session id waits for its first offer."
    )
    max_body_bytes: int = Field(65536, ge=1024, description="Largest HTTP request body accepted.")
    retry_after: int = Field(5, ge=1, description="Retry-After seconds sent with a 503 when full.")
    replica_id: str = Field(
        "",
        pattern=r"^[A-Za-z0-9_-]{0,32}$",
        description="Prefix of the session ids and pc_ids this server makes ('<replica_id>.' "
        "then random), so that a load balancer can send every request of a session to the "
        "replica that owns it. Empty: no prefix.",
    )
    preload_models: bool = Field(
        True, description="Load the embedded models at start-up (else on first use)."
    )
    static_dir: Path | None = Field(
        None,
        description="Folder of the browser client served at /. Default: the repository's "
        "static/ next to server/, else ./static.",
    )
