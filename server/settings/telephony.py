"""Phone calls (issue 26): where providers reach us, Twilio's credentials, the signed
stream tokens, and what one call's media stream may send."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from server.settings.limits_media import NetworkList


def http_base_url(value: str) -> str:
    """An ``http(s)://host[:port][/prefix]`` URL without its trailing slash; empty stays."""
    if not value:
        return value
    parts = urlsplit(value)
    try:
        _ = parts.port  # parsing it is the check: "host:99999" fails
    except ValueError as exc:
        raise ValueError(f"{value!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http:// or https:// URL with a host")
    if parts.query or parts.fragment or parts.username is not None:
        raise ValueError(f"{value!r}: a base URL takes no query, fragment or credentials")
    return value.rstrip("/")


class TelephonySettings(BaseModel):
    """Phone calls through a provider's media streams (Twilio first)."""

    public_url: str = Field(
        "",
        description="The base URL providers reach this server at, e.g. "
        "https://agent.example.com (or with a path prefix). Stream URLs (wss://) and the "
        "URLs webhook signatures are checked against are built from it, not from what a "
        "proxy forwarded. Empty: no phone calls.",
    )
    twilio_auth_token: SecretStr = Field(
        "",  # validated into a SecretStr; a plain "" is what the reference shows as empty
        validate_default=True,
        description="Twilio auth token. When set, webhooks must carry a valid "
        "X-Twilio-Signature and a stream must present the signed token its webhook "
        "issued; it also authenticates REST calls (hang-up). Empty: nothing is checked "
        "(development only).",
    )
    twilio_account_sid: str = Field(
        "",
        pattern=r"^(AC[0-9a-fA-F]{32})?$",
        description="Twilio account SID, for REST calls (hang-up); needs twilio_auth_token.",
    )
    twilio_api_url: str = Field(
        "https://api.twilio.com",
        min_length=1,
        description="Base URL of Twilio's REST API (a local fake in tests).",
    )
    telephony_token_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="How long a signed stream token, issued when a call's webhook is "
        "answered, stays valid to open that call's media stream.",
    )
    telephony_start_seconds: float = Field(
        5.0,
        gt=0,
        le=30,
        description="Seconds a media stream has, once open, to send its start (providers "
        "send it at once); then it is closed unserved.",
    )
    telephony_trusted_networks: NetworkList = Field(
        default_factory=list,
        description="Addresses or networks (CIDR) of the telephony providers' media "
        "servers, JSON list or comma-separated: their streams carry many calls from few "
        "addresses and are exempt from the per-address caps (sessions and connections). "
        "Empty: every stream is held to them, as any client is.",
    )
    telephony_end_digit: str = Field(
        "",
        pattern=r"^[0-9*#A-D]?$",
        description='A DTMF key that ends the caller\'s turn, e.g. "#". Empty: none.',
    )
    phone_message_rate: float = Field(
        100.0,
        gt=0,
        description="Messages per second a media stream may send (20 ms audio frames are "
        "50 a second; below that a call's audio is dropped).",
    )
    phone_message_burst: int = Field(
        200, ge=1, description="Messages a media stream may send at once (after a stall)."
    )
    ws_max_message_bytes: int = Field(
        65536,
        ge=1024,
        le=1048576,
        description="Largest WebSocket message a media stream may send; larger closes it "
        "(a 20 ms media message is about 300 bytes).",
    )

    @field_validator("public_url", "twilio_api_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_base_url(value)

    @model_validator(mode="after")
    def _sid_needs_the_token(self) -> TelephonySettings:
        # The SID alone can do nothing: every REST call is authenticated with the token.
        if self.twilio_account_sid and not self.twilio_auth_token.get_secret_value():
            raise ValueError("twilio_account_sid needs twilio_auth_token")
        return self
