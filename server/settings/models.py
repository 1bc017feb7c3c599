"""The model services: which implementation serves STT, LLM and TTS, the OpenAI-compatible
endpoint and its models, answer length, vision, timeouts, circuit breakers and prices.

"local" runs the embedded models that ship in registry packages; "openai" uses any
OpenAI-compatible endpoint (see ``openai_base_url``); "auto" (the default) means "openai"
when an API key or base URL is set, else "local".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, Field, field_validator, model_validator

from pipeline.services.embedded_specs import DEFAULT_LLM, DEFAULT_STT, LLMName, STTName


class ModelSettings(BaseModel):
    """The STT, LLM and TTS in use and how they are called."""

    stt: Literal["auto", "local", "openai", "deepgram", "assemblyai", "openai-realtime"] = Field(
        "auto",
        description="auto, local, openai (one request per utterance); deepgram, assemblyai "
        "and openai-realtime (OpenAI's realtime transcription, with the OpenAI key): a live "
        "stream per call, hearing the speech as it is spoken (docs/services.md).",
    )
    stt_fallback: list[Literal["local", "openai", "deepgram", "assemblyai", "openai-realtime"]] = (
        Field(
            default_factory=list,
            description="STTs tried in order when the one before fails (no connection, a "
            'timeout, 5xx, a refused key, its breaker open), as JSON: ["openai", "local"]. The '
            "failed utterance's audio goes to the next: no words are lost.",
        )
    )
    llm: Literal["auto", "local", "openai", "realtime", "anthropic", "google"] = Field(
        "auto",
        description="auto, local, openai, realtime: a speech-to-speech model over the "
        "OpenAI Realtime API (the realtime_* settings), which answers in its own voice "
        "(no TTS) while Parley keeps the turn-taking (docs/realtime.md); anthropic: Claude "
        "over the Messages API; google: Gemini (docs/services.md).",
    )
    tts: Literal["auto", "local", "openai", "cartesia", "elevenlabs", "deepgram"] = Field(
        "auto",
        description="auto, local, openai (one request per sentence); cartesia, elevenlabs "
        "and deepgram (Aura): one WebSocket per call, each answer one context of it, with "
        "word times where the vendor gives them (docs/services.md).",
    )
    llm_fallback: list[Literal["local", "openai", "anthropic", "google"]] = Field(
        default_factory=list,
        description="LLMs tried in order when the one before fails before its answer "
        "begins (no connection, no first token in time, 5xx, a refused key, its breaker "
        'open), as JSON: ["openai", "local"]. Each takes its vendor\'s default model; the '
        "same messages go to the next: the user's words are not lost.",
    )
    tts_fallback: list[Literal["local", "openai", "cartesia", "elevenlabs", "deepgram"]] = Field(
        default_factory=list,
        description="TTSs tried in order when the one before fails before a sentence's first "
        "audio (no connection, a timeout, 5xx, a refused key, its breaker open), as JSON: "
        '["openai", "local"]. The fallback speaks that sentence; the next one tries the TTS '
        "again (at once refused while its breaker is open).",
    )
    embedded_llm: LLMName = Field(
        DEFAULT_LLM,
        description="The embedded LLM: qwen2.5-1.5b (calls tools; ~1.1 GB, ~1.9 GB of RAM), "
        "qwen2.5-0.5b (for smaller machines) or smollm2-135m (tiny, no tools). A Qwen whose "
        "packages are missing or whose file fails its check falls back to smollm2-135m.",
    )
    embedded_stt: STTName = Field(
        DEFAULT_STT,
        description="The embedded STT: whisper-base (multilingual, fewer errors) or "
        "whisper-tiny.en (faster); whisper-base falls back to whisper-tiny.en if missing.",
    )
    model_dir: Path | None = Field(
        None,
        description="Folder the chunked embedded models are joined into on first use "
        "(created if missing; must be writable unless already assembled). Unset: "
        "<data_dir>/models.",
    )
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
    llm_max_tokens: int | None = Field(
        None,
        ge=0,
        description="Longest answer of the LLM, in tokens (spoken!). Unset: 80 for the "
        "embedded LLM (which takes 8 to 400), 1024 for the OpenAI-compatible one; 0 or "
        "empty: the OpenAI-compatible LLM is sent no max_tokens.",
    )
    embedded_llm_threads: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Threads of the embedded LLM (unset: half the cores, at most 4). More "
        "are faster on an idle machine, and far slower when anything else wants a core.",
    )
    stt_streaming: bool = Field(
        False,
        description="Embedded STT: transcribe while the user speaks (interim passes, words "
        "two passes agree on kept) instead of once at the pause. Measured slower and less "
        "accurate on two cores (see pipeline/services/local_stt.py); for bigger machines.",
    )
    llm_supports_tools: bool = Field(
        True, description="Whether the OpenAI-compatible LLM can call tools."
    )
    llm_thoughts_in_context: bool = Field(
        False,
        description="Keep the LLM's reasoning in the context as a thinking block (never "
        "spoken, never sent back to the endpoint).",
    )
    llm_vision: bool = Field(
        False,
        description="The OpenAI-compatible LLM takes images: the client's camera and screen "
        "tracks are received, look_at_camera/look_at_screen offered, pictures sent as "
        "image_url parts.",
    )
    vision_every_turn: bool = Field(
        False,
        description="llm_vision: send the current camera/screen picture with every "
        "user turn (else only when the LLM looks).",
    )
    vision_max_images: int = Field(
        3, ge=1, le=50, description="llm_vision: pictures kept in the context (older dropped)."
    )
    vision_image_size: int = Field(
        512, ge=64, le=2048, description="llm_vision: long side of the pictures sent, in px."
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
    tts_ahead_seconds: float = Field(
        3.0,
        ge=0,
        description="Seconds of speech synthesized ahead of playout at most (0: no limit).",
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
    llm_price_input: float = Field(0.0, ge=0, description="USD per million input tokens.")
    llm_price_output: float = Field(0.0, ge=0, description="USD per million output tokens.")

    @field_validator("llm_max_tokens", mode="before")
    @classmethod
    def _empty_means_no_limit(cls, value: Any) -> Any:
        return 0 if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _llm_max_tokens_fits(self) -> ModelSettings:
        tokens = self.llm_max_tokens
        if self.provider("llm") == "local" and tokens is not None and not 8 <= tokens <= 400:
            raise ValueError("llm_max_tokens must be 8 to 400 for the embedded LLM")
        return self

    @model_validator(mode="after")
    def _vision_needs_an_llm_that_sees(self) -> ModelSettings:
        if self.llm_vision and self.provider("llm") not in ("openai", "anthropic", "google"):
            raise ValueError(
                "llm_vision needs an LLM that sees: openai, anthropic or google (the "
                "embedded one sees nothing)"
            )
        return self

    def llm_token_limit(self) -> int | None:
        """The ``max_tokens`` of the LLM in use (its default when unset); None: send none."""
        if self.provider("llm") == "local":
            return self.llm_max_tokens or 80
        # A cap on a runaway answer, far above a spoken one (which the prompt keeps short).
        return 1024 if self.llm_max_tokens is None else self.llm_max_tokens or None

    def embedded_model_dir(self, data_dir: Path) -> Path:
        """Where the chunked embedded models go: ``model_dir``, else ``<data_dir>/models``."""
        return self.model_dir or data_dir / "models"

    def provider(self, role: Literal["stt", "llm", "tts"]) -> str:
        """Which implementation serves ``role``, resolving "auto"."""
        choice = getattr(self, role)
        if choice == "auto":
            return "openai" if (self.openai_api_key or self.openai_base_url) else "local"
        return choice
