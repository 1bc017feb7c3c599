"""A speech-to-speech model over the OpenAI Realtime API (``PARLEY_LLM=realtime``): where
it is, which model and voice, and which dialect of the protocol it speaks."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, Field, SecretStr, field_validator


class RealtimeSettings(BaseModel):
    """The realtime endpoint (used when ``llm`` is ``realtime``)."""

    realtime_base_url: str = Field(
        "wss://api.openai.com/v1",
        description="The realtime endpoint's base (ws:// or wss://); the call's socket is "
        "{base}/realtime?model={realtime_model}, as OpenAI's. Azure's and other compatible "
        "endpoints take their own base here.",
    )
    realtime_model: str = Field("gpt-realtime", description="The speech-to-speech model.")
    realtime_voice: str = Field("marin", description="The model's voice.")
    realtime_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices("PARLEY_REALTIME_API_KEY", "OPENAI_API_KEY"),
        description="Sent as a bearer token (PARLEY_REALTIME_API_KEY, else OPENAI_API_KEY).",
    )
    realtime_dialect: Literal["ga", "beta"] = Field(
        "ga",
        description="The protocol's event and session names Parley sends: ga (OpenAI's "
        "generally available API) or beta (the older names, e.g. for Azure's preview "
        "deployments). Both dialects' names are read from the endpoint either way.",
    )
    realtime_turn_detection: Literal["parley", "server_vad", "semantic_vad"] = Field(
        "parley",
        description="Who decides when the caller has finished: parley (its VAD, end-of-turn "
        "rule and backchannel judgement commit each utterance and ask for each answer; the "
        "provider's VAD is off) or the provider's server_vad / semantic_vad (it hears all the "
        "audio, commits and starts answers itself; Parley still transcribes, keeps the "
        "context, and pauses the bot at a barge-in).",
    )
    realtime_timeout: float = Field(
        10.0,
        gt=0,
        le=120,
        description="Seconds a response may take to its first event, and between events, "
        "before the turn fails (the call goes on; the next turn reconnects if need be).",
    )

    @field_validator("realtime_base_url")
    @classmethod
    def _websocket_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("ws", "wss") or not parts.hostname:
            raise ValueError(f"{value!r} is not a ws:// or wss:// URL with a host")
        return value.rstrip("/")
