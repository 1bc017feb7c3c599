"""The phone-call settings (server/settings/telephony.py): their defaults, the environment,
and the values refused at start."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from server.settings import Settings

SID = "AC" + "0123456789abcdef" * 2


NAMES = ("PUBLIC_URL", "TWILIO_AUTH_TOKEN", "TWILIO_ACCOUNT_SID", "TWILIO_API_URL",
         "TELEPHONY_TOKEN_SECONDS", "TELEPHONY_END_DIGIT", "PHONE_MESSAGE_RATE",
         "PHONE_MESSAGE_BURST", "WS_MAX_MESSAGE_BYTES")  # fmt: skip


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in NAMES:
        monkeypatch.delenv(f"PARLEY_{name}", raising=False)
    settings = Settings()
    assert settings.public_url == ""
    assert settings.twilio_auth_token.get_secret_value() == ""
    assert (settings.twilio_account_sid, settings.twilio_api_url) == ("", "https://api.twilio.com")
    assert settings.telephony_token_seconds == 60.0 and settings.telephony_end_digit == ""
    assert (settings.phone_message_rate, settings.phone_message_burst) == (100.0, 200)
    assert settings.ws_max_message_bytes == 65536


def test_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "PARLEY_PUBLIC_URL": "https://agent.example.com/voice/",
        "PARLEY_TWILIO_AUTH_TOKEN": "tok-secret",
        "PARLEY_TWILIO_ACCOUNT_SID": SID,
        "PARLEY_TWILIO_API_URL": "http://127.0.0.1:9999",
        "PARLEY_TELEPHONY_TOKEN_SECONDS": "30",
        "PARLEY_TELEPHONY_END_DIGIT": "#",
        "PARLEY_PHONE_MESSAGE_RATE": "60",
        "PARLEY_PHONE_MESSAGE_BURST": "120",
        "PARLEY_WS_MAX_MESSAGE_BYTES": "8192",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.public_url == "https://agent.example.com/voice"  # no trailing slash
    assert settings.twilio_auth_token.get_secret_value() == "tok-secret"
    assert "tok-secret" not in repr(settings)
    assert settings.twilio_account_sid == SID
    assert settings.twilio_api_url == "http://127.0.0.1:9999"
    assert (settings.telephony_token_seconds, settings.telephony_end_digit) == (30.0, "#")
    assert (settings.phone_message_rate, settings.phone_message_burst) == (60.0, 120)
    assert settings.ws_max_message_bytes == 8192


@pytest.mark.parametrize("digit", ["", "0", "9", "*", "#", "A", "D"])
def test_end_digits(digit: str) -> None:
    assert Settings(telephony_end_digit=digit).telephony_end_digit == digit


@pytest.mark.parametrize(
    "values",
    [
        {"public_url": "agent.example.com"},
        {"public_url": "ftp://agent.example.com"},
        {"public_url": "wss://agent.example.com"},
        {"public_url": "https://"},
        {"public_url": "https://agent.example.com/?x=1"},
        {"public_url": "https://agent.example.com/#top"},
        {"public_url": "https://user:pw@agent.example.com"},
        {"public_url": "https://agent.example.com:99999"},
        {"twilio_api_url": ""},
        {"twilio_api_url": "api.twilio.com"},
        {"telephony_token_seconds": 0},
        {"telephony_token_seconds": -5},
        {"telephony_token_seconds": 7200},
        {"telephony_end_digit": "##"},
        {"telephony_end_digit": "x"},
        {"telephony_end_digit": "E"},
        {"phone_message_rate": 0},
        {"phone_message_burst": 0},
        {"ws_max_message_bytes": 100},
        {"ws_max_message_bytes": 1 << 30},
        {"twilio_account_sid": "AC123", "twilio_auth_token": "t"},
        {"twilio_account_sid": SID},  # a SID without the token can do nothing
    ],
)
def test_invalid_values_are_refused(values: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Settings(**values)
