"""The session-facing facade: mute, then turns, then idle, through one handle/advance."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.events import (
    BotStartedSpeaking,
    BotStoppedSpeaking,
    Event,
    Interruption,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    UserIdle,
    UserMuteStarted,
    UserMuteStopped,
    UserTurnStarted,
    UserTurnStopped,
    UserTurnStopTimeout,
)
from pipeline.turns import (
    MinWordsTurnStart,
    MuteUntilFirstBotTurn,
    MuteWhileBotSpeaks,
    SilenceAndTranscriptTurnStop,
    SpeechTimeoutTurnStop,
    TranscriptionTurnStart,
    UserMuteStrategy,
    UserTurnParams,
    UserTurns,
    VADTurnStart,
)
from testkit.turn_script import Step, play, rounded


def run(
    script: Sequence[Step],
    params: UserTurnParams | None = None,
    mute: Sequence[UserMuteStrategy] = (),
) -> tuple[list[Event], list[Event]]:
    """(emitted events, dropped events)."""
    out: list[Event] = []
    turns = UserTurns(params, emit=out.append, mute_strategies=mute)
    dropped = play(turns, script)
    return rounded(out), dropped


def test_params_defaults() -> None:
    params = UserTurnParams()
    assert (params.user_turn_stop_timeout, params.user_speech_timeout) == (5.0, 0.6)
    assert (params.min_words, params.user_idle_timeout, params.enable_interruptions) == (
        0,
        0.0,
        True,
    )
    assert [type(s) for s in params.start_strategies()] == [VADTurnStart, TranscriptionTurnStart]
    assert [type(s) for s in params.stop_strategies()] == [SpeechTimeoutTurnStop]
    assert [type(s) for s in UserTurnParams(min_words=3).start_strategies()] == [MinWordsTurnStart]


def test_a_conversation_round_then_the_user_goes_idle() -> None:
    script: list[Step] = [
        SpeechStarted(1.0),
        Transcription("what's the weather", 2.0),
        SpeechStopped(2.1),
        3.0,
        BotStartedSpeaking(3.5),
        BotStoppedSpeaking(6.0),
        20.0,
    ]
    out, dropped = run(script, UserTurnParams(user_idle_timeout=4.0))
    assert out == [
        UserTurnStarted(1.0, "vad", interrupt=True),
        UserTurnStopped(2.7, "speech_timeout"),
        UserIdle(10.0),
    ]
    assert dropped == []


def test_speech_after_the_bot_stops_cancels_idle() -> None:
    script: list[Step] = [
        BotStartedSpeaking(0.0),
        BotStoppedSpeaking(1.0),
        SpeechStarted(2.0),
        Transcription("hi", 2.5),
        SpeechStopped(3.0),
        30.0,
    ]
    out, _ = run(script, UserTurnParams(user_idle_timeout=4.0))
    assert out == [
        UserTurnStarted(2.0, "vad", interrupt=True),
        UserTurnStopped(3.6, "speech_timeout"),
    ]


def test_backchannel_does_not_interrupt_but_a_real_request_does() -> None:
    script: list[Step] = [
        BotStartedSpeaking(0.0),
        SpeechStarted(2.0),
        Transcription("mhm", 2.3),
        SpeechStopped(2.4),
        5.0,
        SpeechStarted(5.0),
        Transcription("wait, stop,", 5.6, final=False),
        Transcription("wait, stop, I meant", 5.9, final=False),
        BotStoppedSpeaking(6.0),  # the session cut the bot off
        Transcription("wait, stop, I meant Tuesday", 6.4),
        SpeechStopped(6.5),
        20.0,
    ]
    out, _ = run(script, UserTurnParams(min_words=3, user_idle_timeout=4.0))
    assert out == [
        UserTurnStarted(5.9, "min_words", interrupt=True),
        UserTurnStopped(7.1, "speech_timeout"),
    ]


def test_interruptions_disabled() -> None:
    script: list[Step] = [BotStartedSpeaking(0.0), SpeechStarted(1.0)]
    out, _ = run(script, UserTurnParams(enable_interruptions=False))
    assert out == [UserTurnStarted(1.0, "vad", interrupt=False)]


def test_muted_speech_never_becomes_a_turn() -> None:
    script: list[Step] = [
        BotStartedSpeaking(1.0),
        SpeechStarted(1.5),
        Transcription("stop", 1.8),
        SpeechStopped(2.0),
        BotStoppedSpeaking(3.0),
        10.0,
    ]
    out, dropped = run(script, mute=[MuteWhileBotSpeaks()])
    assert out == [UserMuteStarted(1.0), UserMuteStopped(3.0)]
    assert dropped == [SpeechStarted(1.5), Transcription("stop", 1.8), SpeechStopped(2.0)]


def test_mute_until_first_bot_turn_from_the_first_tick() -> None:
    script: list[Step] = [
        0.0,
        SpeechStarted(0.5),
        BotStartedSpeaking(1.0),
        BotStoppedSpeaking(4.0),
        SpeechStarted(5.0),
    ]
    out, dropped = run(script, mute=[MuteUntilFirstBotTurn()])
    assert out == [
        UserMuteStarted(0.0),
        UserMuteStopped(4.0),
        UserTurnStarted(5.0, "vad", interrupt=True),
    ]
    assert dropped == [SpeechStarted(0.5)]


def test_stop_timeout_through_the_facade() -> None:
    out, _ = run([SpeechStarted(0.0), SpeechStopped(1.0), 30.0])
    assert out == [
        UserTurnStarted(0.0, "vad", interrupt=True),
        UserTurnStopTimeout(6.0),
        UserTurnStopped(6.0, "timeout"),
    ]


def test_explicit_strategies_override_the_params() -> None:
    out: list[Event] = []
    turns = UserTurns(
        emit=out.append,
        start_strategies=[VADTurnStart()],
        stop_strategies=[SilenceAndTranscriptTurnStop()],
    )
    play(turns, [SpeechStarted(0.0), SpeechStopped(1.0), Transcription("yes", 1.2)])
    assert out == [
        UserTurnStarted(0.0, "vad", interrupt=True),
        UserTurnStopped(1.2, "silence_and_transcript"),
    ]
    assert not turns.turn_active


def test_next_deadline_tells_the_session_when_to_tick() -> None:
    turns = UserTurns(UserTurnParams(user_idle_timeout=4.0), emit=lambda _: None)
    assert turns.next_deadline() is None
    play(turns, [SpeechStarted(0.0), Transcription("hi", 0.5), SpeechStopped(1.0)])
    assert turns.next_deadline() == 1.6
    play(turns, [1.6, BotStartedSpeaking(2.0), BotStoppedSpeaking(3.0)])
    assert turns.next_deadline() == 7.0


def test_a_subscriber_may_feed_events_back() -> None:
    out: list[Event] = []
    dropped: list[bool] = []

    def subscriber(event: Event) -> None:
        out.append(event)
        if isinstance(event, UserTurnStarted):
            # Re-entrant calls see a settled state; their output is delivered after ours.
            dropped.append(turns.handle(Interruption(event.t)))
            dropped.append(turns.handle(SpeechStopped(1.5)))
            dropped.append(turns.handle(Transcription("hi", 1.6)))
            assert out == [event]

    turns = UserTurns(
        emit=subscriber,
        start_strategies=[VADTurnStart()],
        stop_strategies=[SilenceAndTranscriptTurnStop()],
    )
    play(turns, [1.0, SpeechStarted(1.0)])
    assert out == [
        UserTurnStarted(1.0, "vad", interrupt=True),
        UserTurnStopped(1.6, "silence_and_transcript"),
    ]
    assert dropped == [False, False, False]
