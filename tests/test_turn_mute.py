"""Mute strategies and their combiner: mute started/stopped events and what gets dropped."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.events import (
    AudioIdle,
    BotStartedSpeaking,
    BotStoppedSpeaking,
    Event,
    FunctionCall,
    FunctionCallCancelled,
    FunctionCallResult,
    FunctionCallsStarted,
    Interruption,
    LLMText,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    UserMuteStarted,
    UserMuteStopped,
)
from pipeline.turns import (
    MuteDuringFirstBotSpeech,
    MuteDuringFunctionCalls,
    MuteUntilFirstBotTurn,
    MuteWhileBotSpeaks,
    UserMute,
    UserMuteStrategy,
)
from testkit.turn_script import Step, play


def run(strategies: Sequence[UserMuteStrategy], script: Sequence[Step]) -> tuple[list, list]:
    """(emitted events, dropped events)."""
    out: list[Event] = []
    dropped = play(UserMute(strategies, emit=out.append), script)
    return out, dropped


def calls(*ids: str) -> FunctionCallsStarted:
    return FunctionCallsStarted(calls=tuple(FunctionCall(i, "lookup") for i in ids))


def result(call_id: str, is_final: bool = True) -> FunctionCallResult:
    return FunctionCallResult(call_id, "lookup", {"ok": True}, is_final=is_final)


def test_no_strategies_never_mutes() -> None:
    assert run([], [BotStartedSpeaking(0.0), SpeechStarted(1.0)]) == ([], [])


def test_mute_while_bot_speaks_drops_user_events_until_the_bot_stops() -> None:
    script: list[Step] = [
        SpeechStarted(0.5),
        SpeechStopped(0.8),
        BotStartedSpeaking(1.0),
        SpeechStarted(1.5),
        Transcription("wait", 1.7),
        SpeechStopped(1.8),
        Interruption(1.8),
        BotStoppedSpeaking(3.0),
        SpeechStarted(4.0),
        BotStartedSpeaking(5.0),
        AudioIdle(5.5),
        BotStoppedSpeaking(6.0),
    ]
    out, dropped = run([MuteWhileBotSpeaks()], script)
    assert out == [
        UserMuteStarted(1.0),
        UserMuteStopped(3.0),
        UserMuteStarted(5.0),
        UserMuteStopped(6.0),
    ]
    assert dropped == [
        SpeechStarted(1.5),
        Transcription("wait", 1.7),
        SpeechStopped(1.8),
        Interruption(1.8),
        AudioIdle(5.5),
    ]


def test_the_events_that_change_mute_are_never_dropped() -> None:
    # Decided from the state before the event: the bot's own events always pass.
    _, dropped = run([MuteWhileBotSpeaks()], [BotStartedSpeaking(1.0), BotStoppedSpeaking(2.0)])
    assert dropped == []


def test_mute_during_first_bot_speech_only() -> None:
    script: list[Step] = [
        SpeechStarted(0.2),  # before the bot ever spoke: allowed
        BotStartedSpeaking(1.0),
        SpeechStarted(1.5),
        BotStoppedSpeaking(3.0),
        BotStartedSpeaking(5.0),
        SpeechStarted(5.5),  # second bot speech: allowed
        BotStoppedSpeaking(7.0),
    ]
    out, dropped = run([MuteDuringFirstBotSpeech()], script)
    assert out == [UserMuteStarted(1.0), UserMuteStopped(3.0)]
    assert dropped == [SpeechStarted(1.5)]


def test_mute_until_first_bot_turn_mutes_from_the_start() -> None:
    script: list[Step] = [
        0.0,
        SpeechStarted(0.2),
        BotStartedSpeaking(1.0),
        Transcription("hello?", 1.5),
        BotStoppedSpeaking(3.0),
        SpeechStarted(4.0),
        BotStartedSpeaking(5.0),
        SpeechStarted(5.5),
    ]
    out, dropped = run([MuteUntilFirstBotTurn()], script)
    assert out == [UserMuteStarted(0.0), UserMuteStopped(3.0)]
    assert dropped == [SpeechStarted(0.2), Transcription("hello?", 1.5)]


def test_initial_mute_is_settled_by_the_first_event_when_no_tick_came() -> None:
    out, dropped = run([MuteUntilFirstBotTurn()], [SpeechStarted(0.7)])
    assert out == [UserMuteStarted(0.7)]
    assert dropped == [SpeechStarted(0.7)]


def test_mute_during_function_calls_until_every_call_is_done() -> None:
    script: list[Step] = [
        2.0,
        calls("a", "b"),
        SpeechStarted(2.5),
        result("a"),
        result("b", is_final=False),  # an async tool's progress: still running
        Transcription("any news?", 3.0),
        3.5,
        FunctionCallCancelled("b", "lookup"),
        SpeechStarted(4.0),
    ]
    out, dropped = run([MuteDuringFunctionCalls()], script)
    assert out == [UserMuteStarted(2.0), UserMuteStopped(3.5)]
    assert dropped == [SpeechStarted(2.5), Transcription("any news?", 3.0)]


def test_a_result_delivered_twice_is_harmless() -> None:
    out, _ = run([MuteDuringFunctionCalls()], [1.0, calls("a"), result("a"), result("a")])
    assert out == [UserMuteStarted(1.0), UserMuteStopped(1.0)]


def test_mute_is_the_or_of_its_strategies() -> None:
    script: list[Step] = [
        BotStartedSpeaking(1.0),
        calls("a"),
        BotStoppedSpeaking(2.0),  # still muted: the call runs
        SpeechStarted(2.5),
        LLMText("..."),  # not a user event: passes even while muted
        3.0,
        result("a"),
        SpeechStarted(3.5),
    ]
    out, dropped = run([MuteWhileBotSpeaks(), MuteDuringFunctionCalls()], script)
    assert out == [UserMuteStarted(1.0), UserMuteStopped(3.0)]
    assert dropped == [SpeechStarted(2.5)]


def test_user_mute_reports_its_state() -> None:
    mute = UserMute([MuteWhileBotSpeaks()], emit=lambda _: None)
    assert not mute.muted
    mute.handle(BotStartedSpeaking(1.0))
    assert mute.muted
