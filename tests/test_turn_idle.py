"""User idle detection: once, after the bot stopped, only while nobody has the floor."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.events import (
    BotStartedSpeaking,
    BotStoppedSpeaking,
    Event,
    FunctionCall,
    FunctionCallCancelled,
    FunctionCallResult,
    FunctionCallsStarted,
    UserIdle,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.turns import UserIdleController
from testkit.turn_script import Step, play, rounded


def run(script: Sequence[Step], timeout: float = 3.0) -> list[Event]:
    out: list[Event] = []
    play(UserIdleController(timeout, emit=out.append), script)
    return rounded(out)


def test_idle_fires_once_after_the_timeout() -> None:
    assert run([BotStoppedSpeaking(1.0), 3.99]) == []
    assert run([BotStoppedSpeaking(1.0), 4.0, 100.0]) == [UserIdle(4.0)]


def test_idle_fires_at_its_deadline_however_coarse_the_ticks() -> None:
    assert run([BotStoppedSpeaking(1.0), 50.0]) == [UserIdle(4.0)]


def test_idle_does_not_run_while_the_bot_speaks() -> None:
    script: list[Step] = [BotStoppedSpeaking(1.0), BotStartedSpeaking(2.0), 20.0]
    assert run(script) == []
    assert run([*script, BotStoppedSpeaking(20.0), 30.0]) == [UserIdle(23.0)]


def test_a_user_turn_cancels_idle_and_it_waits_for_the_bot_again() -> None:
    script: list[Step] = [
        BotStoppedSpeaking(1.0),
        UserTurnStarted(2.0, "vad", True),
        UserTurnStopped(3.0, "speech_timeout"),
        20.0,
        BotStartedSpeaking(20.0),
        BotStoppedSpeaking(22.0),
        30.0,
    ]
    assert run(script) == [UserIdle(25.0)]


def test_bot_stopping_during_a_user_turn_starts_no_timer() -> None:
    # A barge-in: the bot is cut off while the user keeps talking.
    script: list[Step] = [
        BotStartedSpeaking(0.0),
        UserTurnStarted(1.0, "vad", True),
        BotStoppedSpeaking(1.1),
        UserTurnStopped(2.0, "speech_timeout"),
        30.0,
    ]
    assert run(script) == []


def test_pending_function_calls_hold_idle_off() -> None:
    started = FunctionCallsStarted(calls=(FunctionCall("a", "lookup"),))
    script: list[Step] = [
        BotStoppedSpeaking(1.0),
        started,  # cancels the running timer
        BotStoppedSpeaking(2.0),  # call still pending: no timer
        10.0,
        FunctionCallResult("a", "lookup", 1, is_final=False),
        BotStoppedSpeaking(11.0),  # an intermediate result leaves the call running
        20.0,
        FunctionCallResult("a", "lookup", 2),
        BotStoppedSpeaking(21.0),
        30.0,
    ]
    assert run(script) == [UserIdle(24.0)]
    cancelled: list[Step] = [started, FunctionCallCancelled("a", "lookup"), BotStoppedSpeaking(1.0)]
    assert run([*cancelled, 9.0]) == [UserIdle(4.0)]


def test_zero_timeout_turns_idle_off() -> None:
    controller = UserIdleController(0, emit=lambda _: None)
    controller.handle(BotStoppedSpeaking(1.0))
    assert not controller.enabled
    assert controller.next_deadline() is None
