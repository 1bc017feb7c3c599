"""Every setting in one place, read from the environment (prefix ``PARLEY_``)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from pipeline.interruptions import DEFAULT_BACKCHANNELS
from pipeline.turns.mute_names import MuteName


class IceServer(BaseModel):
    """One STUN or TURN server, in the browser's ``RTCIceServer`` shape."""

    urls: list[str] | str
    username: str | None = None
    credential: str | None = None


ReportLevel = Literal["none", "name", "full"]


class ClientToolDefinition(BaseModel):
    """A tool the client runs (RTVI ``llm-function-call-result``), offered to the LLM."""

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    report_level: ReportLevel | None = None
    timeout: float | None = Field(None, gt=0, description="Default: client_tool_timeout.")
    cancel_on_interruption: bool = True

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('parameters must be a JSON schema with "type": "object"')
        return value


class Settings(BaseSettings):
    """Server settings. Each field can be set as ``PARLEY_<NAME>`` (lists as JSON)."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_", extra="ignore")

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
        description="Inbound audio packets (20 ms each) held before decoding. aiortc's own "
        "default is 4; every packet is latency on each user turn. Raise it on networks "
        "that reorder packets.",
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

    # Access control and limits (see README "Security and limits").
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="API keys; when any is set, signalling and session routes need "
        "'Authorization: Bearer <key>'. JSON list or comma-separated. Empty: open server.",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Origins allowed to call the API from a browser (CORS), JSON list or "
        'comma-separated, e.g. ["https://app.example"]. Empty: same origin only.',
    )
    max_sdp_bytes: int = Field(32768, ge=1024, description="Largest SDP offer accepted (400).")
    max_candidates: int = Field(64, ge=1, description="ICE candidates in one PATCH; more get 413.")
    max_session_candidates: int = Field(
        256, ge=1, description="ICE candidates one peer connection may trickle in all; 413."
    )
    max_message_bytes: int = Field(
        65536, ge=256, description="Largest data-channel message; larger gets an RTVI error."
    )
    message_rate: float = Field(
        20.0, gt=0, description="Data-channel messages per second per session (pings count)."
    )
    message_burst: int = Field(
        40, ge=1, description="Data-channel messages a session may send at once."
    )
    max_text_chars: int = Field(4096, ge=1, description="Longest send-text content, in characters.")
    max_session_seconds: float = Field(
        3600.0, ge=0, description="Longest session; it is then told and closed (0: no limit)."
    )
    session_rate_per_minute: float = Field(
        10.0, ge=0, description="New sessions per minute per client address (0: no limit)."
    )
    session_burst: int = Field(
        10, ge=1, description="New sessions a client address may open at once; then 429."
    )

    @field_validator("api_keys", "cors_origins", "user_mute", mode="before")
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        """A JSON list, or a comma-separated string, from the environment."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [item.strip() for item in text.split(",") if item.strip()]
        return value

    preload_models: bool = Field(
        True, description="Load the embedded models at start-up (else on first use)."
    )
    static_dir: Path | None = Field(
        None,
        description="Folder of the browser client served at /. Default: the repository's "
        "static/ next to server/, else ./static.",
    )

    # Session records (transcripts).
    storage: Literal["sqlite", "none"] = Field(
        "sqlite",
        description="Where session records go: sqlite (a file in data_dir, kept across "
        "restarts) or none (nothing written; live sessions' transcripts only).",
    )
    data_dir: Path = Field(
        Path("data"), description="Folder for the transcript database (created if missing)."
    )
    transcript_retention_days: float = Field(
        0.0, ge=0, description="Delete records of sessions that ended longer ago (0 = keep)."
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
    demo_tools: bool = Field(
        False,
        description="Also offer research_topic, an example async tool that consults no "
        "sources (a demo of progress updates; never for real users).",
    )
    ui_tools: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Offer the UI tools (toast, navigate, highlight, focus, click, select, "
        "fill) to LLMs that can call tools: auto = once the client has sent a ui-snapshot.",
    )
    ui_state_max_chars: int = Field(
        4000, ge=200, description="Longest <ui_state> outline of the client's UI the LLM gets."
    )
    ui_snapshot_max_nodes: int = Field(
        500, ge=10, description="Elements kept from a client's ui-snapshot (the rest pruned)."
    )
    ui_events_to_llm: bool = Field(
        False, description="Note each ui-event from the client in the LLM context."
    )
    ui_job_groups: bool = Field(
        True, description="Report async tool calls of one LLM response as a ui-job-group."
    )
    function_call_report_level: ReportLevel = Field(
        "name", description="How much of a tool call the client sees: none, name, or full."
    )
    function_call_report_levels: dict[str, ReportLevel] = Field(
        default_factory=dict,
        description='Per-tool report levels over the default, JSON: {"get_current_time": "full"}.',
    )
    client_tools: list[ClientToolDefinition] = Field(
        default_factory=list,
        description="Tools the client runs, JSON: "
        '[{"name": "get_location", "description": "...", "parameters": {JSON schema}}].',
    )
    client_tool_timeout: float = Field(
        10.0, gt=0, description="Seconds a client has to answer a client-side tool call."
    )
    rtvi_audio_levels: bool = Field(
        True, description="Send user-audio-level and bot-audio-level (10 Hz, while speaking)."
    )
    rtvi_bot_tts_audio: bool = Field(
        False, description="Send the bot's TTS audio as bot-tts-audio messages (base64 PCM)."
    )
    rtvi_bot_llm_thoughts: bool = Field(
        True,
        description="Send the LLM's reasoning as server-message bot-llm-thought-* messages.",
    )
    rtvi_system_log: Literal["off", "TRACE", "DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "off",
        description="Forward the session's log lines at this level and above as "
        "system-log messages (they can hold private data).",
    )
    rtvi_legacy_function_call: bool = Field(
        False,
        description="Announce client-side tool calls with the deprecated llm-function-call "
        "instead of llm-function-call-in-progress (for clients that predate it).",
    )
    vad_confidence: float = Field(0.7, gt=0, lt=1)
    vad_start_secs: float = Field(0.2, gt=0)
    vad_stop_secs: float = Field(
        0.2,
        gt=0,
        description="Silence before the VAD reports a stop: the earliest a turn can end.",
    )
    turn_end: Literal["adaptive", "fixed"] = Field(
        "adaptive",
        description="How the end of the user's turn is decided: adaptive (the end-of-turn "
        "model, the words and the silence together) or fixed (user_speech_timeout after "
        "every pause).",
    )
    user_speech_timeout: float = Field(
        0.6, ge=0, description="fixed: silence after the VAD stop before the turn ends."
    )
    turn_end_question_wait: tuple[float, float] = Field(
        (0.0, 0.7),
        description="adaptive: seconds from the end of speech to the end of a turn whose "
        "words end with a question mark, when the model is sure it is done / sure it is not.",
    )
    turn_end_statement_wait: tuple[float, float] = Field(
        (0.7, 1.2), description="adaptive: the same for a turn whose words end otherwise."
    )
    turn_end_max_wait: float = Field(
        2.0,
        gt=0,
        description="adaptive: the wait after unfinished words (a dangling 'and', 'for', "
        "'um'), and the longest of all.",
    )
    turn_end_confident: float = Field(
        0.9, gt=0, le=1, description="adaptive: model probability that counts as 'done'."
    )
    turn_end_doubtful: float = Field(
        0.3, ge=0, lt=1, description="adaptive: model probability that counts as 'not done'."
    )
    turn_end_score_timeout: float = Field(
        0.35,
        ge=0,
        description="adaptive: how long after the VAD stop to wait for the model before "
        "deciding without it.",
    )
    preemptive_replies: bool = Field(
        True,
        description="adaptive: start the answer, held, shortly before the turn is expected "
        "to end; play it when it does, drop it unseen if the user goes on.",
    )
    turn_merge_window: float = Field(
        1.0,
        ge=0,
        description="If the user speaks again within this many seconds of the end of a turn "
        "that is being answered, the answer stops and the two make one turn (0: off).",
    )
    user_turn_stop_timeout: float = Field(5.0, gt=0)
    user_idle_timeout: float = Field(
        0.0,
        ge=0,
        description="Seconds of user silence after the bot spoke before the client is told "
        "(server-message user-idle) and the bot checks in (0 = off).",
    )
    user_idle_check_ins: int = Field(
        2, ge=0, description="Check-ins of an idle user before the call ends (see below)."
    )
    user_idle_end_call: bool = Field(
        True, description="End the call when the user stays idle after the last check-in."
    )
    user_idle_prompt: str = Field(
        "The user has been silent for a while. In one short sentence, check whether they "
        "are still there.",
        description="What the LLM is told (a system message) to check in on an idle user.",
    )
    user_idle_goodbye: str = Field(
        "It seems you have stepped away. Goodbye for now!",
        description="Spoken before an idle call ends; empty: hang up without a word.",
    )
    user_mute: Annotated[list[MuteName], NoDecode] = Field(
        default_factory=list,
        description="When the user is not listened to (JSON list or comma-separated): "
        "first_bot_speech, until_first_bot_turn, bot_speaking, function_calls.",
    )
    turn_completion: bool = Field(
        False,
        description="The LLM starts each answer with a turn marker: complete, or cut off "
        "(short wait) or thinking (long wait); only complete turns are answered.",
    )
    turn_completion_short_timeout: float = Field(
        5.0, gt=0, description="turn_completion: seconds before a cut-off user is prompted."
    )
    turn_completion_long_timeout: float = Field(
        15.0, gt=0, description="turn_completion: seconds before a thinking user is prompted."
    )
    context_summarization: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Summarize older history when the context nears context_max_tokens: "
        "auto = on for the OpenAI-compatible LLM (the embedded one trims to its window).",
    )
    context_max_tokens: int = Field(
        8000,
        ge=0,
        description="The most conversation history (estimated tokens after the system "
        "prompt) the LLM is sent; summaries start at 3/4 of it, the oldest messages are "
        "dropped past it. 0: no limit.",
    )
    context_summary_max_tokens: int = Field(
        1000, gt=0, description="max_tokens of the summary call."
    )
    min_words_to_interrupt: int = Field(
        0,
        ge=0,
        description="Words needed to barge in while the bot speaks (0 = any speech; with "
        "pause_on_interruption a backchannel does not interrupt anyway).",
    )
    pause_on_interruption: bool = Field(
        True,
        description="At the user's voice over the bot, pause the bot (silent within a frame) "
        "and decide: a real interruption cancels the reply, a backchannel, a cough or the "
        "bot's own echo lets it go on from where it paused. False: cancel at once.",
    )
    backchannels: list[str] = Field(
        default_factory=lambda: list(DEFAULT_BACKCHANNELS),
        description="Utterances that only show the user is listening (JSON list); made of "
        "these phrases alone, speech over the bot does not interrupt it.",
    )
    max_backchannel_seconds: float = Field(
        1.0, gt=0, description="Speech over the bot longer than this is an interruption."
    )
    false_interruption_timeout: float = Field(
        1.0,
        gt=0,
        description="No words within this long after speech over the bot ended: the bot goes on.",
    )
    echo_cancellation: bool = Field(
        True,
        description="Cancel the bot's own voice in the user's audio (a speakerphone, a "
        "client without echo cancellation) with WebRTC's AEC3, what was played as reference.",
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
    llm_max_tokens: int | None = Field(
        None,
        ge=0,
        description="Longest answer of the LLM, in tokens (spoken!). Unset: 80 for the "
        "embedded LLM (which takes 8 to 400), 1024 for the OpenAI-compatible one; 0 or "
        "empty: the OpenAI-compatible LLM is sent no max_tokens.",
    )
    llm_supports_tools: bool = Field(
        True, description="Whether the OpenAI-compatible LLM can call tools."
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
    llm_thoughts_in_context: bool = Field(
        False,
        description="Keep the LLM's reasoning in the context as a thinking block (never "
        "spoken, never sent back to the endpoint).",
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

    @model_validator(mode="after")
    def _turn_end_thresholds(self) -> Settings:
        if self.turn_end_doubtful >= self.turn_end_confident:
            raise ValueError("turn_end_doubtful must be below turn_end_confident")
        for name in ("turn_end_question_wait", "turn_end_statement_wait"):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise ValueError(f"{name} must be [sure-done, sure-not-done] with 0 <= a <= b")
        return self

    @field_validator("llm_max_tokens", mode="before")
    @classmethod
    def _empty_means_no_limit(cls, value: Any) -> Any:
        return 0 if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _llm_max_tokens_fits(self) -> Settings:
        tokens = self.llm_max_tokens
        if self.provider("llm") == "local" and tokens is not None and not 8 <= tokens <= 400:
            raise ValueError("llm_max_tokens must be 8 to 400 for the embedded LLM")
        return self

    @model_validator(mode="after")
    def _vision_needs_an_llm_that_sees(self) -> Settings:
        if self.llm_vision and self.provider("llm") != "openai":
            raise ValueError(
                "llm_vision needs the OpenAI-compatible LLM (the embedded one sees nothing)"
            )
        return self

    @model_validator(mode="after")
    def _first_turn_mute_needs_a_greeting(self) -> Settings:
        if "until_first_bot_turn" in self.user_mute and not self.greeting.strip():
            raise ValueError(
                "user_mute until_first_bot_turn needs a greeting: without one the bot never "
                "speaks first and the user is never heard"
            )
        return self

    def summarizes_context(self) -> bool:
        """Whether older history is summarized as the context nears its budget."""
        if self.context_summarization == "auto":
            return self.provider("llm") == "openai" and self.context_max_tokens > 0
        return self.context_summarization == "on"

    def llm_token_limit(self) -> int | None:
        """The ``max_tokens`` of the LLM in use (its default when unset); None: send none."""
        if self.provider("llm") == "local":
            return self.llm_max_tokens or 80
        # A cap on a runaway answer, far above a spoken one (which the prompt keeps short).
        return 1024 if self.llm_max_tokens is None else self.llm_max_tokens or None

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
