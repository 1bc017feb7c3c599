"""Settings come from the environment, with documented defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from server.settings import Settings


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert (settings.host, settings.port) == ("127.0.0.1", 7860)
    assert settings.ice_servers == []
    assert settings.liveness_timeout == 10.0
    assert settings.max_body_bytes == 65536
    assert [settings.provider(r) for r in ("stt", "llm", "tts")] == ["local"] * 3
    assert settings.openai_api_key is None


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_PORT", "9000")
    monkeypatch.setenv("PARLEY_MAX_SESSIONS", "3")
    monkeypatch.setenv(
        "PARLEY_ICE_SERVERS",
        '[{"urls": "stun:stun.example.test:3478"}, '
        '{"urls": ["turn:t.example.test"], "username": "u", "credential": "c"}]',
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    settings = Settings()
    assert settings.port == 9000 and settings.max_sessions == 3
    assert settings.ice_servers[0].urls == "stun:stun.example.test:3478"
    assert settings.ice_servers[1].username == "u"
    assert settings.openai_api_key == "sk-test"
    # A key makes every "auto" service use the OpenAI-compatible endpoint, unless pinned.
    assert settings.provider("llm") == "openai"
    monkeypatch.setenv("PARLEY_STT", "local")
    assert Settings().provider("stt") == "local"


def test_invalid_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_MAX_SESSIONS", "0")
    with pytest.raises(ValidationError):
        Settings()


def test_rtvi_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_FUNCTION_CALL_REPORT_LEVELS", '{"get_current_time": "full"}')
    monkeypatch.setenv("PARLEY_CLIENT_TOOLS", '[{"name": "get_location"}]')
    settings = Settings()
    assert settings.function_call_report_levels == {"get_current_time": "full"}
    tool = settings.client_tools[0]
    assert tool.parameters == {"type": "object", "properties": {}} and tool.timeout is None
    assert (settings.rtvi_audio_levels, settings.rtvi_bot_tts_audio) == (False, False)
    assert settings.rtvi_system_log == "off"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PARLEY_FUNCTION_CALL_REPORT_LEVELS", '{"get_current_time": "everything"}'),
        ("PARLEY_CLIENT_TOOLS", '[{"name": "has spaces"}]'),
        ("PARLEY_CLIENT_TOOLS", '[{"name": "t", "parameters": {"type": "string"}}]'),
        ("PARLEY_CLIENT_TOOL_TIMEOUT", "0"),
        ("PARLEY_RTVI_SYSTEM_LOG", "loud"),
    ],
)
def test_invalid_rtvi_settings_are_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        Settings()


def test_turn_taking_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from server.session.pipeline_params import turn_params

    defaults = Settings()
    assert defaults.turn_end == "adaptive" and defaults.preemptive_replies
    assert defaults.pause_on_interruption and defaults.echo_cancellation
    assert "mhm" in defaults.backchannels and "i see" in defaults.backchannels
    monkeypatch.setenv("PARLEY_TURN_END", "fixed")
    monkeypatch.setenv("PARLEY_TURN_END_QUESTION_WAIT", "[0.1, 0.5]")
    monkeypatch.setenv("PARLEY_TURN_END_MAX_WAIT", "3")
    monkeypatch.setenv("PARLEY_BACKCHANNELS", '["bien", "d\'accord"]')
    settings = Settings()
    params = turn_params(settings)
    assert params.turn_end == "fixed"
    assert params.adaptive.question_wait == (0.1, 0.5) and params.adaptive.max_wait == 3.0
    assert settings.backchannels == ["bien", "d'accord"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PARLEY_TURN_END", "smart"),
        ("PARLEY_TURN_END_QUESTION_WAIT", "[0.8, 0.2]"),  # sure-done must not wait longer
        ("PARLEY_TURN_END_STATEMENT_WAIT", "[0.5]"),
        ("PARLEY_TURN_END_DOUBTFUL", "0.95"),  # above confident
        ("PARLEY_TURN_MERGE_WINDOW", "-1"),
        ("PARLEY_MAX_BACKCHANNEL_SECONDS", "0"),
    ],
)
def test_invalid_turn_taking_settings_are_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        Settings()


def test_embedded_model_choices(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PARLEY_EMBEDDED_LLM", raising=False)  # the suite's small model
    monkeypatch.setenv("PARLEY_DATA_DIR", str(tmp_path / "data"))
    defaults = Settings()
    assert (defaults.embedded_llm, defaults.embedded_stt) == ("qwen2.5-1.5b", "whisper-base")
    assert defaults.model_dir is None
    assert defaults.embedded_model_dir(defaults.data_dir) == tmp_path / "data" / "models"
    monkeypatch.setenv("PARLEY_EMBEDDED_LLM", "qwen2.5-0.5b")
    monkeypatch.setenv("PARLEY_EMBEDDED_STT", "whisper-tiny.en")
    monkeypatch.setenv("PARLEY_MODEL_DIR", str(tmp_path / "models"))
    settings = Settings()
    assert (settings.embedded_llm, settings.embedded_stt) == ("qwen2.5-0.5b", "whisper-tiny.en")
    assert settings.embedded_model_dir(settings.data_dir) == tmp_path / "models"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PARLEY_EMBEDDED_LLM", "gpt-4o-mini"),
        ("PARLEY_EMBEDDED_LLM", "qwen"),
        ("PARLEY_EMBEDDED_STT", "whisper-large"),
    ],
)
def test_unknown_embedded_models_are_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=name.removeprefix("PARLEY_").lower()):
        Settings()
