"""The vendors' settings (server/settings/vendors.py): keys from each vendor's usual variable,
a missing key named at start, the vendor's default model, URLs, and no SDK imported unless
its vendor is chosen."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from server.settings import Settings

VARIABLES = (
    "ANTHROPIC_API_KEY",
    "PARLEY_ANTHROPIC_API_KEY",
    "GOOGLE_API_KEY",
    "GEMINI_API_KEY",
    "PARLEY_GOOGLE_API_KEY",
    "PARLEY_LLM_MODEL",
    "PARLEY_LLM",
    "CARTESIA_API_KEY",
    "ELEVENLABS_API_KEY",
    "DEEPGRAM_API_KEY",
    "PARLEY_TTS",
    "PARLEY_TTS_MODEL",
    "PARLEY_TTS_VOICE",
)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("vendor", "named"),
    [("anthropic", "ANTHROPIC_API_KEY"), ("google", "GOOGLE_API_KEY or GEMINI_API_KEY")],
)
def test_a_chosen_vendor_without_its_key_stops_the_start_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, vendor: str, named: str
) -> None:
    monkeypatch.setenv("PARLEY_LLM", vendor)
    with pytest.raises(ValidationError, match=f"PARLEY_LLM={vendor} needs an API key: set {named}"):
        Settings()


@pytest.mark.parametrize(
    ("variable", "vendor"),
    [
        ("ANTHROPIC_API_KEY", "anthropic"),
        ("GEMINI_API_KEY", "google"),
        ("GOOGLE_API_KEY", "google"),
        ("PARLEY_ANTHROPIC_API_KEY", "anthropic"),
    ],
)
def test_keys_come_from_the_vendors_usual_variables(
    monkeypatch: pytest.MonkeyPatch, variable: str, vendor: str
) -> None:
    monkeypatch.setenv("PARLEY_LLM", vendor)
    monkeypatch.setenv(variable, "k-1")
    settings = Settings()
    assert settings.vendor_key(vendor) == "k-1"
    assert "k-1" not in repr(settings)  # a secret: never in a log line


def test_the_model_is_the_vendors_default_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("GOOGLE_API_KEY", "k")
    assert Settings(llm="anthropic").llm_model_name() == "claude-haiku-4-5"
    assert Settings(llm="google").llm_model_name() == "gemini-2.5-flash"
    assert Settings(llm="openai").llm_model_name() == "gpt-4o-mini"
    monkeypatch.setenv("PARLEY_LLM_MODEL", "claude-sonnet-4-5")
    assert Settings(llm="anthropic").llm_model_name() == "claude-sonnet-4-5"


@pytest.mark.parametrize(
    ("vendor", "named"),
    [("cartesia", "CARTESIA_API_KEY"), ("elevenlabs", "ELEVENLABS_API_KEY"),
     ("deepgram", "DEEPGRAM_API_KEY")],
)  # fmt: skip
def test_a_voice_without_its_key_stops_the_start_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, vendor: str, named: str
) -> None:
    monkeypatch.setenv("PARLEY_TTS", vendor)
    with pytest.raises(ValidationError, match=f"PARLEY_TTS={vendor} needs an API key: set {named}"):
        Settings()


def test_a_voice_takes_the_vendors_defaults_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARTESIA_API_KEY", "k")
    monkeypatch.setenv("DEEPGRAM_API_KEY", "k")
    assert Settings(tts="cartesia").tts_voice_of("cartesia")[0] == "sonic-3"
    assert Settings(tts="deepgram").tts_voice_of("deepgram") == ("aura-2-thalia-en", "")
    assert Settings(tts="openai").tts_voice_of("openai") == ("gpt-4o-mini-tts", "alloy")
    monkeypatch.setenv("PARLEY_TTS_VOICE", "my-voice")
    assert Settings(tts="cartesia").tts_voice_of("cartesia") == ("sonic-3", "my-voice")
    assert Settings(tts="cartesia", cartesia_url="http://127.0.0.1:9/").cartesia_url == (
        "http://127.0.0.1:9"
    )


def test_a_vendor_url_must_be_http_with_a_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    assert Settings(anthropic_url="http://127.0.0.1:9/").anthropic_url == "http://127.0.0.1:9"
    with pytest.raises(ValidationError, match="not an http"):
        Settings(google_url="wss://example.test")


def test_no_vendor_sdk_is_imported_unless_its_vendor_is_chosen() -> None:
    code = (
        "import sys, server.api.app, server.session.model_services, server.__main__; "
        "sdks = ('anthropic', 'google.genai', 'deepgram', 'assemblyai', 'cartesia', "
        "'elevenlabs'); "
        "print(sorted(m for m in sdks if m in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "[]"


def test_an_llm_fallback_takes_its_vendors_default_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    settings = Settings(llm="anthropic", llm_model="claude-sonnet-4-5", llm_fallback=["openai"])
    assert settings.llm_model_name() == "claude-sonnet-4-5"
    assert settings.llm_model_name("openai") == "gpt-4o-mini"
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ValidationError, match="PARLEY_LLM_FALLBACK=anthropic needs an API key"):
        Settings(llm="openai", llm_fallback=["anthropic"])


def test_openai_realtime_transcription_needs_the_openai_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "PARLEY_OPENAI_API_KEY", "PARLEY_OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValidationError, match="PARLEY_STT=openai-realtime needs an API key"):
        Settings(stt="openai-realtime")
    settings = Settings(stt="openai-realtime", openai_api_key="k")
    assert settings.stt_model_name("openai-realtime") == "gpt-4o-transcribe"
