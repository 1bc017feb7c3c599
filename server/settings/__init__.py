"""Every setting in one place, read from the environment (prefix ``PARLEY_``).

:class:`Settings` is one flat object (``settings.max_sessions``, ``PARLEY_MAX_SESSIONS``);
its fields are declared by group, one module each: :mod:`~server.settings.process`,
:mod:`~server.settings.access`, :mod:`~server.settings.storage`,
:mod:`~server.settings.recording`, :mod:`~server.settings.bot`,
:mod:`~server.settings.rtvi`, :mod:`~server.settings.turns`, :mod:`~server.settings.models`,
:mod:`~server.settings.realtime`,
:mod:`~server.settings.agent` and :mod:`~server.settings.telephony`. Rules that span groups
are checked here.
"""

from __future__ import annotations

from functools import lru_cache

from pydantic import model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline.services.embedded_specs import stt_spec
from server.settings.access import AccessSettings
from server.settings.agent import AgentSettings
from server.settings.bot import ClientToolDefinition, ConversationSettings, ReportLevel
from server.settings.limits_channel import ChannelLimitSettings
from server.settings.limits_conversation import ConversationLimitSettings
from server.settings.limits_media import MediaLimitSettings
from server.settings.limits_signalling import SignallingLimitSettings
from server.settings.models import ModelSettings
from server.settings.process import IceServer, ProcessSettings
from server.settings.realtime import RealtimeSettings
from server.settings.recording import RecordingSettings
from server.settings.rtvi import RTVISettings
from server.settings.storage import StorageSettings
from server.settings.telephony import TelephonySettings
from server.settings.turns import TurnSettings
from server.settings.vendors import (
    DEFAULT_MODELS,
    DEFAULT_STT_MODELS,
    DEFAULT_TTS,
    VendorSettings,
)

__all__ = [
    "ClientToolDefinition",
    "IceServer",
    "ReportLevel",
    "Settings",
    "get_settings",
]


# The groups in reverse: pydantic lists the fields of the last base first, so the fields
# keep the order of the groups as the module docstring names them.
class Settings(
    ConversationLimitSettings,
    MediaLimitSettings,
    SignallingLimitSettings,
    ChannelLimitSettings,
    TelephonySettings,
    AgentSettings,
    RealtimeSettings,
    VendorSettings,
    ModelSettings,
    TurnSettings,
    RTVISettings,
    ConversationSettings,
    RecordingSettings,
    StorageSettings,
    AccessSettings,
    ProcessSettings,
    BaseSettings,
):
    """Server settings. Each field can be set as ``PARLEY_<NAME>`` (lists as JSON)."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_", extra="ignore")

    @model_validator(mode="after")
    def _first_turn_mute_needs_a_greeting(self) -> Settings:
        if "until_first_bot_turn" in self.user_mute and not self.greeting.strip():
            raise ValueError(
                "user_mute until_first_bot_turn needs a greeting: without one the bot never "
                "speaks first and the user is never heard"
            )
        return self

    @model_validator(mode="after")
    def _a_vendor_needs_its_key(self) -> Settings:
        stts = [("stt", self.stt), *(("stt_fallback", name) for name in self.stt_fallback)]
        ttss = [("tts", self.tts), *(("tts_fallback", name) for name in self.tts_fallback)]
        llms = [("llm", self.llm), *(("llm_fallback", name) for name in self.llm_fallback)]
        for role, vendor in [*llms, *stts, *ttss]:
            problem = self.missing_vendor_key(vendor, role)
            if vendor == "openai-realtime" and not self.openai_api_key:
                problem = (f"PARLEY_{role.upper()}=openai-realtime needs an API key: set "
                           "OPENAI_API_KEY or PARLEY_OPENAI_API_KEY")  # fmt: skip
            if problem is not None:
                raise ValueError(problem)
        return self

    def stt_model_name(self, vendor: str) -> str:
        """The STT model for ``vendor``: ``stt_model`` when set and it is the chosen STT,
        else the vendor's default (a fallback always takes its vendor's default)."""
        if vendor == self.stt and "stt_model" in self.model_fields_set:
            return self.stt_model
        return DEFAULT_STT_MODELS.get(vendor, self.stt_model)

    def tts_voice_of(self, vendor: str) -> tuple[str, str]:
        """The TTS model and voice for ``vendor``: ``tts_model`` / ``tts_voice`` when set
        and it is the chosen TTS, else the vendor's defaults."""
        model, voice = DEFAULT_TTS.get(vendor, (self.tts_model, self.tts_voice))
        if vendor == self.tts:
            model = self.tts_model if "tts_model" in self.model_fields_set else model
            voice = self.tts_voice if "tts_voice" in self.model_fields_set else voice
        return model, voice

    def llm_model_name(self, vendor: str | None = None) -> str:
        """The model of the LLM ``vendor`` (unset: the chosen one): ``llm_model`` when set
        and it is the chosen LLM, else the vendor's default (a fallback always takes its
        vendor's default)."""
        vendor = vendor or self.provider("llm")
        if vendor == self.provider("llm") and "llm_model" in self.model_fields_set:
            return self.llm_model
        default = self.model_fields["llm_model"].default
        return DEFAULT_MODELS.get(
            vendor, default if vendor != self.provider("llm") else self.llm_model
        )

    @model_validator(mode="after")
    def _recordings_need_a_store(self) -> Settings:
        if self.recording and self.storage == "none":
            raise ValueError(
                "recording needs a transcript store (storage sqlite or postgres): a "
                "recording is served under its transcript's keys and expires with it"
            )
        return self

    @model_validator(mode="after")
    def _embedded_stt_hears_the_language(self) -> Settings:
        if self.provider("stt") == "local" and self.language != "en":
            # faster-whisper's language table takes ~0.5 s to import: only when needed.
            from pipeline.services.local_stt import language_problem

            spec = stt_spec(self.embedded_stt)
            problem = language_problem(self.language, spec.multilingual, spec.name)
            if problem is not None:
                raise ValueError(
                    f"language {self.language!r} and embedded_stt {spec.name}: {problem} "
                    "Or use an OpenAI-compatible STT (PARLEY_STT=openai)."
                )
        return self

    def summarizes_context(self) -> bool:
        """Whether older history is summarized as the context nears its budget."""
        if self.context_summarization == "auto":
            return self.provider("llm") == "openai" and self.context_max_tokens > 0
        return self.context_summarization == "on"


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
