"""The vendors' own APIs (LLM: anthropic, google; STT: deepgram, assemblyai; TTS: cartesia,
elevenlabs, deepgram): their keys,
from each vendor's usual variable, and where they are.

``PARLEY_<VENDOR>_URL`` replaces the scheme and host only (a proxy, a regional or
self-hosted endpoint, a test's fake); the vendor's own paths are appended by its SDK.
The LLM's model setting (``llm_model``) applies to whichever LLM is chosen; unset, each
vendor has its own default (:data:`DEFAULT_MODELS`). A chosen vendor without its key
stops the start with the variable's name (:meth:`VendorSettings.missing_vendor_key`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, Field, SecretStr, field_validator

# Fast, tool-calling models: a spoken answer wants the first token soon.
DEFAULT_MODELS = {"anthropic": "claude-haiku-4-5", "google": "gemini-2.5-flash"}
DEFAULT_STT_MODELS = {
    "deepgram": "nova-3",
    "assemblyai": "universal-streaming-english",
    "openai-realtime": "gpt-4o-transcribe",
}
# (model, voice) of each TTS vendor when tts_model / tts_voice are left alone. Deepgram's
# Aura names its voice in the model.
DEFAULT_TTS = {
    "cartesia": ("sonic-3", "f786b574-daa5-4673-aa0c-cbe3e8534c02"),
    "elevenlabs": ("eleven_flash_v2_5", "21m00Tcm4TlvDq8ikWAM"),
    "deepgram": ("aura-2-thalia-en", ""),
}
# The variables a vendor's key is read from, first found wins (named in errors).
KEY_VARIABLES = {
    "anthropic": ("ANTHROPIC_API_KEY", "PARLEY_ANTHROPIC_API_KEY"),
    "google": ("GOOGLE_API_KEY", "GEMINI_API_KEY", "PARLEY_GOOGLE_API_KEY"),
    "deepgram": ("DEEPGRAM_API_KEY", "PARLEY_DEEPGRAM_API_KEY"),
    "assemblyai": ("ASSEMBLYAI_API_KEY", "PARLEY_ASSEMBLYAI_API_KEY"),
    "cartesia": ("CARTESIA_API_KEY", "PARLEY_CARTESIA_API_KEY"),
    "elevenlabs": ("ELEVENLABS_API_KEY", "PARLEY_ELEVENLABS_API_KEY"),
}


class VendorSettings(BaseModel):
    """Keys and endpoints of the vendors' LLM APIs."""

    anthropic_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices(*KEY_VARIABLES["anthropic"]),
        description="PARLEY_LLM=anthropic: the key (ANTHROPIC_API_KEY).",
    )
    anthropic_url: str | None = Field(
        None,
        description="PARLEY_LLM=anthropic: scheme and host in place of https://api.anthropic.com "
        "(a proxy, a regional endpoint, a test's fake); the API's paths are appended.",
    )
    google_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices(*KEY_VARIABLES["google"]),
        description="PARLEY_LLM=google: the Gemini API key (GOOGLE_API_KEY or GEMINI_API_KEY).",
    )
    google_url: str | None = Field(
        None,
        description="PARLEY_LLM=google: scheme and host in place of "
        "https://generativelanguage.googleapis.com; the API's paths are appended.",
    )
    deepgram_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices(*KEY_VARIABLES["deepgram"]),
        description="STT and TTS deepgram: the key (DEEPGRAM_API_KEY).",
    )
    deepgram_url: str | None = Field(
        None,
        description="STT and TTS deepgram: scheme and host in place of wss://api.deepgram.com "
        "(ws, wss, http or https); /v1/listen or /v1/speak is appended.",
    )
    assemblyai_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices(*KEY_VARIABLES["assemblyai"]),
        description="STT assemblyai: the key (ASSEMBLYAI_API_KEY).",
    )
    assemblyai_url: str | None = Field(
        None,
        description="STT assemblyai: scheme and host in place of "
        "wss://streaming.assemblyai.com; /v3/ws is appended.",
    )
    cartesia_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices(*KEY_VARIABLES["cartesia"]),
        description="TTS cartesia: the key (CARTESIA_API_KEY).",
    )
    cartesia_url: str | None = Field(
        None,
        description="TTS cartesia: scheme and host in place of wss://api.cartesia.ai; "
        "/tts/websocket is appended.",
    )
    elevenlabs_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices(*KEY_VARIABLES["elevenlabs"]),
        description="TTS elevenlabs: the key (ELEVENLABS_API_KEY).",
    )
    elevenlabs_url: str | None = Field(
        None,
        description="TTS elevenlabs: scheme and host in place of wss://api.elevenlabs.io; "
        "/v1/text-to-speech/<voice>/multi-stream-input is appended.",
    )
    llm_thinking_budget: int = Field(
        0,
        ge=0,
        le=64000,
        description="anthropic, google: tokens the model may think for before it answers "
        "(its thought streamed as reasoning, never spoken); 0: no thinking asked for. "
        "Thinking delays the first word: for a voice, keep it off or small.",
    )

    @field_validator("anthropic_url", "google_url")
    @classmethod
    def _vendor_url(cls, value: str | None) -> str | None:
        return _url(value, ("http", "https"))

    @field_validator("deepgram_url", "assemblyai_url", "cartesia_url", "elevenlabs_url")
    @classmethod
    def _vendor_socket_url(cls, value: str | None) -> str | None:
        return _url(value, ("ws", "wss", "http", "https"))

    def vendor_key(self, vendor: str) -> str | None:
        """The key of ``vendor`` (a name in :data:`KEY_VARIABLES`), as text, or None."""
        key = getattr(self, f"{vendor}_api_key", None)
        return key.get_secret_value() if key else None

    def missing_vendor_key(self, vendor: str, role: str = "llm") -> str | None:
        """What to tell the operator when ``vendor`` is chosen and its key is not set."""
        if vendor not in KEY_VARIABLES or self.vendor_key(vendor):
            return None
        names = " or ".join(KEY_VARIABLES[vendor][:2])
        return f"PARLEY_{role.upper()}={vendor} needs an API key: set {names}"


def _url(value: str | None, schemes: tuple[str, ...]) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in schemes or not parts.hostname:
        said = " or ".join(f"{scheme}://" for scheme in schemes)
        raise ValueError(f"{value!r} is not an {said} URL with a host")
    return value.rstrip("/")
