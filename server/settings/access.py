"""Access control and limits (see docs/security.md): API keys, CORS, and the
size and rate limits on what a client may send."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field, SecretStr
from pydantic_settings import NoDecode

from server.settings.lists import split_list


class AccessSettings(BaseModel):
    """Who may call the API, and how much a client may send."""

    api_keys: Annotated[list[SecretStr], NoDecode, BeforeValidator(split_list)] = Field(
        default_factory=list,
        description="API keys; when any is set, signalling and session routes need "
        "'Authorization: Bearer <key>'. JSON list or comma-separated. Empty: open server.",
    )
    cors_origins: Annotated[list[str], NoDecode, BeforeValidator(split_list)] = Field(
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
