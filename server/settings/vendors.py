"""The vendors' own LLM APIs (``PARLEY_LLM=anthropic`` or ``google``): their keys, from each
vendor's usual variable, and where they are.

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
# The variables a vendor's key is read from, first found wins (named in errors).
KEY_VARIABLES = {
    "anthropic": ("ANTHROPIC_API_KEY", "PARLEY_ANTHROPIC_API_KEY"),
    "google": ("GOOGLE_API_KEY", "GEMINI_API_KEY", "PARLEY_GOOGLE_API_KEY"),
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
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http:// or https:// URL with a host")
        return value.rstrip("/")

    def vendor_key(self, vendor: str) -> str | None:
        """The key of ``vendor`` ("anthropic" or "google"), as text, or None."""
        key = self.anthropic_api_key if vendor == "anthropic" else self.google_api_key
        return key.get_secret_value() if key else None

    def missing_vendor_key(self, vendor: str) -> str | None:
        """What to tell the operator when ``vendor`` is chosen and its key is not set."""
        if vendor not in KEY_VARIABLES or self.vendor_key(vendor):
            return None
        names = " or ".join(KEY_VARIABLES[vendor][:2])
        return f"PARLEY_LLM={vendor} needs an API key: set {names}"
