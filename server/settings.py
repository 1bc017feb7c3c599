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

    preload_models: bool = Field(
        True, description="Load the embedded models at start-up (else on first use)."
    )
    static_dir: Path | None = Field(
        None,
        description="Folder of the browser client served at /. Default: the repository's "
        "static/ next to server/, else ./static.",
    )

    # The conversation.
    system_prompt: str = Field(
        "You are Parley, a friendly voice assistant. Your answers are spoken aloud, so keep "
        "them short: one or two sentences, plain words, no lists, no markdown, no emoji.",
        description="The LLM's system prompt.",
    )
    greeting: str = Field(
        "Hello! How can I help you today?",
        description="Spoken when the client is ready; empty for no greeting.",
    )
    tools_enabled: bool = Field(
        True, description="Offer the built-in tools to LLMs that can call them."
    )
    function_call_report_level: Literal["none", "name", "full"] = Field(
        "name", description="How much of a tool call the client sees: none, name, or full."
    )
    vad_confidence: float = Field(0.7, gt=0, lt=1)
    vad_start_secs: float = Field(0.2, gt=0)
    vad_stop_secs: float = Field(
        0.2,
        gt=0,
        description="Silence before the VAD reports a stop; the turn then waits "
        "user_speech_timeout more (0.8 s is right when the VAD alone ends the turn).",
    )
    user_speech_timeout: float = Field(0.6, ge=0)
    user_turn_stop_timeout: float = Field(5.0, gt=0)
    user_idle_timeout: float = Field(0.0, ge=0, description="0 = off.")
    min_words_to_interrupt: int = Field(
        0, ge=0, description="Words needed to barge in while the bot speaks (0 = any speech)."
    )
    llm_price_input: float = Field(0.0, ge=0, description="USD per million input tokens.")
    llm_price_output: float = Field(0.0, ge=0, description="USD per million output tokens.")

    # Model choices. "local" runs the embedded models that ship in registry packages;
    # "openai" uses any OpenAI-compatible endpoint (see openai_base_url); "auto" (the
    # default) means "openai" when an API key or base URL is set, else "local".
    stt: Literal["auto", "local", "openai"] = "auto"
    llm: Literal["auto", "local", "openai"] = "auto"
    tts: Literal["auto", "local", "openai"] = "auto"
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
    llm_max_tokens: int = Field(
        80, ge=8, le=400, description="Longest answer of the embedded LLM, in tokens (spoken!)."
    )
    llm_supports_tools: bool = Field(
        True, description="Whether the OpenAI-compatible LLM can call tools."
    )
    llm_timeout: float = Field(
        10.0, gt=0, description="Seconds to the first token, or between chunks."
    )
    stt_timeout: float = Field(
        10.0, gt=0, description="Seconds a transcription may take, retries included."
    )
    tts_timeout: float = Field(
        10.0, gt=0, description="Seconds to the first audio of a sentence, or between chunks."
    )
    circuit_failure_threshold: int = Field(
        5,
        ge=0,
        description="Failed calls in a row that open a model endpoint's circuit breaker "
        "(0: never open).",
    )
    circuit_cooldown: float = Field(
        10.0, gt=0, description="Seconds an open breaker refuses calls before a probe goes."
    )

    def provider(self, role: Literal["stt", "llm", "tts"]) -> Literal["local", "openai"]:
        """Which implementation serves ``role``, resolving "auto"."""
        choice = getattr(self, role)
        if choice == "auto":
            return "openai" if (self.openai_api_key or self.openai_base_url) else "local"
        return choice


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
