"""Every setting in one place, read from the environment (prefix ``PARLEY_``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class IceServer(BaseModel):
    """One STUN or TURN server, in the browser's ``RTCIceServer`` shape."""

    urls: list[str] | str
    username: str | None = None
    credential: str | None = None


class Settings(BaseSettings):
    """Server settings. Each field can be set as ``PARLEY_<NAME>`` (lists as JSON)."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_", extra="ignore")

    host: str = Field("0.0.0.0", description="Address the HTTP server binds to.")
    port: int = Field(7860, ge=0, le=65535, description="HTTP port.")
    log_level: Literal["TRACE", "DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    ice_servers: list[IceServer] = Field(
        default_factory=list,
        description="STUN/TURN servers for the peer connection and for /start's iceConfig. "
        'JSON, e.g. [{"urls": ["turn:turn.example:3478"], "username": "u", "credential": "p"}]. '
        "Empty by default: no public STUN server is assumed reachable.",
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

    static_dir: Path | None = Field(
        None,
        description="Folder of the browser client served at /. Default: the repository's "
        "static/ next to server/, else ./static.",
    )

    # Model choices. "local" runs the embedded models that ship in registry packages;
    # "openai" uses any OpenAI-compatible endpoint (see openai_base_url).
    stt: Literal["local", "openai"] = "local"
    llm: Literal["local", "openai"] = "local"
    tts: Literal["local", "openai"] = "local"
    openai_api_key: str | None = Field(
        None, validation_alias=AliasChoices("PARLEY_OPENAI_API_KEY", "OPENAI_API_KEY")
    )
    openai_base_url: str | None = Field(
        None, validation_alias=AliasChoices("PARLEY_OPENAI_BASE_URL", "OPENAI_BASE_URL")
    )
    llm_model: str = "gpt-4o-mini"
    stt_model: str = "whisper-1"
    tts_model: str = "gpt-4o-mini-tts"
    tts_voice: str = "alloy"


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
