"""The context layer's settings: mute strategies by name, turn completion, the context
budget and the idle user, read from the environment and refused when wrong."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pipeline.turns import (
    MuteDuringFirstBotSpeech,
    MuteDuringFunctionCalls,
    MuteUntilFirstBotTurn,
    MuteWhileBotSpeaks,
)
from pipeline.turns.mute_names import mute_strategies
from server.settings import Settings


def test_defaults() -> None:
    settings = Settings()
    assert settings.user_mute == [] and settings.turn_completion is False
    assert (settings.turn_completion_short_timeout, settings.turn_completion_long_timeout) == (
        5.0,
        15.0,
    )
    assert settings.context_max_tokens == 8000 and settings.context_summary_max_tokens == 1000
    assert settings.user_idle_timeout == 0 and settings.user_idle_check_ins == 2
    assert settings.user_idle_end_call is True


def test_summaries_are_on_by_default_for_the_openai_compatible_llm() -> None:
    assert Settings(llm="openai").summarizes_context() is True
    assert Settings(llm="local").summarizes_context() is False
    assert Settings(llm="local", context_summarization="on").summarizes_context() is True
    assert Settings(llm="openai", context_summarization="off").summarizes_context() is False
    assert Settings(llm="openai", context_max_tokens=0).summarizes_context() is False


@pytest.mark.parametrize(
    "value", ['["bot_speaking", "function_calls"]', "bot_speaking, function_calls"]
)
def test_user_mute_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PARLEY_USER_MUTE", value)
    assert Settings().user_mute == ["bot_speaking", "function_calls"]


def test_mute_names_make_fresh_strategies() -> None:
    names = ["first_bot_speech", "until_first_bot_turn", "bot_speaking", "function_calls"]
    made = mute_strategies([*names, "bot_speaking"])
    assert [type(s) for s in made] == [
        MuteDuringFirstBotSpeech,
        MuteUntilFirstBotTurn,
        MuteWhileBotSpeaks,
        MuteDuringFunctionCalls,
    ]
    assert mute_strategies(names)[0] is not made[0], "per session: they keep state"
    with pytest.raises(ValueError, match="unknown mute strategies"):
        mute_strategies(["always"])


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("PARLEY_USER_MUTE", '["always"]', "user_mute"),
        ("PARLEY_TURN_COMPLETION_SHORT_TIMEOUT", "0", "turn_completion_short_timeout"),
        ("PARLEY_CONTEXT_MAX_TOKENS", "-1", "context_max_tokens"),
        ("PARLEY_CONTEXT_SUMMARY_MAX_TOKENS", "0", "context_summary_max_tokens"),
        ("PARLEY_CONTEXT_SUMMARIZATION", "sometimes", "context_summarization"),
        ("PARLEY_USER_IDLE_CHECK_INS", "-1", "user_idle_check_ins"),
    ],
)
def test_invalid_values_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=message):
        Settings()


def test_muting_until_the_bot_speaks_needs_a_greeting() -> None:
    with pytest.raises(ValidationError, match="needs a greeting"):
        Settings(user_mute=["until_first_bot_turn"], greeting="")
    assert Settings(user_mute=["until_first_bot_turn"], greeting="Hi.").user_mute
