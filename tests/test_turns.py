"""User-turn start/stop strategies and the turn controller, on scripted timelines."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pipeline.events import (
    AudioIdle,
    BotStartedSpeaking,
    BotStoppedSpeaking,
    Event,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    UserTurnStarted,
    UserTurnStopped,
    UserTurnStopTimeout,
)
from pipeline.turns import (
    MinWordsTurnStart,
    SilenceAndTranscriptTurnStop,
    SpeechTimeoutTurnStop,
    TranscriptionTurnStart,
    UserTurnController,
    UserTurnStartStrategy,
    UserTurnStopStrategy,
    VADTurnStart,
)
from testkit.turn_script import Step, play, rounded


def text(words: str, t: float, final: bool = True) -> Transcription:
    return Transcription(text=words, t=t, final=final)


def run(
    script: Sequence[Step],
    start: Sequence[UserTurnStartStrategy] | None = None,
    stop: Sequence[UserTurnStopStrategy] | None = None,
    timeout: float = 5.0,
) -> list[Event]:
    out: list[Event] = []
    controller = UserTurnController(
        start if start is not None else [VADTurnStart(), TranscriptionTurnStart()],
        stop if stop is not None else [SpeechTimeoutTurnStop()],
        user_turn_stop_timeout=timeout,
        emit=out.append,
    )
    play(controller, script)
    return rounded(out)


def started(t: float, strategy: str, interrupt: bool = True) -> UserTurnStarted:
    return UserTurnStarted(t=t, strategy=strategy, interrupt=interrupt)


# -- start strategies -----------------------------------------------------------------


def test_vad_start_begins_the_turn_at_speech_onset() -> None:
    assert run([SpeechStarted(1.0), text("hello", 1.5)], stop=[SilenceAndTranscriptTurnStop()]) == [
        started(1.0, "vad")
    ]


def test_transcription_start_when_no_vad_event_came() -> None:
    out = run([text("hello there", 2.0)], start=[VADTurnStart(), TranscriptionTurnStart()])
    assert out[0] == started(2.0, "transcription")


def test_transcription_start_ignores_empty_text_and_optionally_interims() -> None:
    assert run([text("  ", 1.0)]) == []
    no_interim = [TranscriptionTurnStart(use_interim=False)]
    assert run([text("hel", 1.0, final=False)], start=no_interim) == []
    assert run([text("hel", 1.0, final=False)])[0] == started(1.0, "transcription")


def test_a_transcript_inside_a_vad_turn_does_not_start_another() -> None:
    out = run([SpeechStarted(0.0), text("hi", 0.5), text("there", 0.8)])
    assert out == [started(0.0, "vad")]


def test_interruptions_disabled_gives_a_turn_without_interrupt() -> None:
    out = run([SpeechStarted(1.0)], start=[VADTurnStart(enable_interruptions=False)])
    assert out == [started(1.0, "vad", interrupt=False)]


def test_min_words_backchannel_while_bot_speaks_starts_no_turn() -> None:
    script: list[Step] = [
        BotStartedSpeaking(0.0),
        SpeechStarted(2.0),
        text("mhm", 2.3, final=False),
        SpeechStopped(2.4),
        text("mhm", 2.6),
        SpeechStarted(4.0),
        text("yeah", 4.4),
        SpeechStopped(4.5),
        10.0,
    ]
    assert run(script, start=[MinWordsTurnStart(min_words=3)]) == []


def test_min_words_real_interruption_starts_an_interrupting_turn() -> None:
    script: list[Step] = [
        BotStartedSpeaking(0.0),
        SpeechStarted(2.0),
        text("wait", 2.3, final=False),
        text("wait, stop", 2.5, final=False),
        text("wait, stop, I", 2.7, final=False),
        text("wait, stop, I meant Tuesday", 3.2, final=False),
    ]
    assert run(script, start=[MinWordsTurnStart(min_words=3)]) == [started(2.7, "min_words")]


def test_min_words_adds_up_final_segments_of_one_utterance() -> None:
    script: list[Step] = [
        BotStartedSpeaking(0.0),
        SpeechStarted(2.0),
        text("wait,", 2.4),
        text("stop", 2.6),
        text("I meant Tuesday", 3.0),
    ]
    assert run(script, start=[MinWordsTurnStart(min_words=3)]) == [started(3.0, "min_words")]


def test_min_words_when_the_bot_is_silent_starts_at_the_vad() -> None:
    script: list[Step] = [BotStartedSpeaking(0.0), BotStoppedSpeaking(1.0), SpeechStarted(2.0)]
    assert run(script, start=[MinWordsTurnStart(min_words=3)]) == [started(2.0, "min_words")]


def test_min_words_without_vad_starts_at_one_word_when_the_bot_is_silent() -> None:
    assert run([text("yes", 1.0)], start=[MinWordsTurnStart(min_words=3)]) == [
        started(1.0, "min_words")
    ]


def test_min_words_rejects_zero() -> None:
    with pytest.raises(ValueError):
        MinWordsTurnStart(min_words=0)


# -- stop: silence plus a final transcript ------------------------------------------------


SILENCE_AND_TEXT = [SilenceAndTranscriptTurnStop()]


def test_silence_then_transcript_stops_at_the_transcript() -> None:
    script = [SpeechStarted(0.0), SpeechStopped(1.0), text("book a table", 1.4)]
    assert run(script, stop=SILENCE_AND_TEXT) == [
        started(0.0, "vad"),
        UserTurnStopped(t=1.4, strategy="silence_and_transcript"),
    ]


def test_transcript_then_silence_stops_at_the_vad_stop() -> None:
    script = [SpeechStarted(0.0), text("book a table", 0.9), SpeechStopped(1.0)]
    assert run(script, stop=SILENCE_AND_TEXT)[1:] == [
        UserTurnStopped(t=1.0, strategy="silence_and_transcript")
    ]


def test_silence_and_transcript_waits_for_the_final_after_an_interim() -> None:
    script = [
        SpeechStarted(0.0),
        text("I want", 0.6),
        text("to", 0.9, final=False),
        SpeechStopped(1.0),
        text("to book", 1.3),
    ]
    assert run(script, stop=SILENCE_AND_TEXT)[1:] == [
        UserTurnStopped(t=1.3, strategy="silence_and_transcript")
    ]


def test_silence_and_transcript_a_resumed_voice_holds_the_turn() -> None:
    script = [SpeechStarted(0.0), SpeechStopped(1.0), SpeechStarted(1.2), text("book", 1.3)]
    assert run(script, stop=SILENCE_AND_TEXT) == [started(0.0, "vad")]


# -- stop: speech timeout ---------------------------------------------------------------------


def test_speech_timeout_stops_after_the_pause_when_text_arrived_first() -> None:
    script = [SpeechStarted(0.0), text("book a table", 0.9), SpeechStopped(1.0), 1.59]
    assert run(script) == [started(0.0, "vad")]
    assert run([*script, 1.6])[1:] == [UserTurnStopped(t=1.6, strategy="speech_timeout")]


def test_speech_timeout_fires_at_its_deadline_however_coarse_the_ticks() -> None:
    script = [SpeechStarted(0.0), text("hi", 0.5), SpeechStopped(1.0), 30.0]
    assert run(script)[1:] == [UserTurnStopped(t=1.6, strategy="speech_timeout")]


def test_speech_timeout_text_after_the_pause_stops_at_once() -> None:
    script = [SpeechStarted(0.0), SpeechStopped(1.0), 2.0, text("book a table", 2.5)]
    assert run(script)[1:] == [UserTurnStopped(t=2.5, strategy="speech_timeout")]


def test_speech_resuming_before_the_timeout_cancels_the_stop() -> None:
    script = [
        SpeechStarted(0.0),
        text("I want to", 0.8),
        SpeechStopped(1.0),
        SpeechStarted(1.3),
        2.0,
        SpeechStopped(2.0),
        2.59,
    ]
    assert run(script) == [started(0.0, "vad")]
    assert run([*script, 2.6])[1:] == [UserTurnStopped(t=2.6, strategy="speech_timeout")]


def test_speech_timeout_starts_when_the_stop_is_learned_not_at_speech_end() -> None:
    # The VAD reports the stop 0.2 s after the speech ended (its own stop window).
    script = [SpeechStarted(0.0), text("hi", 0.5), 1.2, SpeechStopped(1.0), 10.0]
    assert run(script)[1:] == [UserTurnStopped(t=1.8, strategy="speech_timeout")]


def test_speech_timeout_without_vad_measures_quiet_since_the_last_transcript() -> None:
    script = [text("book", 1.0), text("a table", 1.4), 10.0]
    assert run(script) == [
        started(1.0, "transcription"),
        UserTurnStopped(t=2.0, strategy="speech_timeout"),
    ]


def test_speech_timeout_can_end_on_vad_alone() -> None:
    stop = [SpeechTimeoutTurnStop(user_speech_timeout=0.3, wait_for_transcript=False)]
    script = [SpeechStarted(0.0), SpeechStopped(1.0), 5.0]
    assert run(script, stop=stop)[1:] == [UserTurnStopped(t=1.3, strategy="speech_timeout")]


# -- a turn started by its own transcript after the VAD stop (min-words over the bot) --------


BARGE_IN: list[Step] = [
    BotStartedSpeaking(0.0),
    SpeechStarted(1.0),
    SpeechStopped(2.0),
    text("wait, stop, I meant Tuesday", 2.3),
]


def test_late_interrupting_transcript_with_silence_and_transcript_stops_at_once() -> None:
    out = run([*BARGE_IN, 9.0], start=[MinWordsTurnStart(min_words=3)], stop=SILENCE_AND_TEXT)
    assert out == [
        started(2.3, "min_words"),
        UserTurnStopped(t=2.3, strategy="silence_and_transcript"),
    ]


def test_late_interrupting_transcript_with_speech_timeout_waits_the_pause() -> None:
    out = run([*BARGE_IN, 9.0], start=[MinWordsTurnStart(min_words=3)])
    assert out == [started(2.3, "min_words"), UserTurnStopped(t=2.9, strategy="speech_timeout")]


# -- the stop-timeout watchdog ---------------------------------------------------------------------


def test_stop_timeout_ends_a_turn_no_strategy_ends() -> None:
    script = [SpeechStarted(0.0), SpeechStopped(1.0), 5.99]
    assert run(script) == [started(0.0, "vad")]
    assert run([*script, 20.0])[1:] == [
        UserTurnStopTimeout(t=6.0),
        UserTurnStopped(t=6.0, strategy="timeout"),
    ]


def test_stop_timeout_restarts_on_each_transcript_and_vad_event() -> None:
    script = [
        SpeechStarted(0.0),
        SpeechStopped(1.0),
        text("um", 3.0, final=False),
        SpeechStarted(7.0),
        SpeechStopped(7.5),
        30.0,
    ]
    assert run(script)[1:] == [
        UserTurnStopTimeout(t=12.5),
        UserTurnStopped(t=12.5, strategy="timeout"),
    ]


def test_stop_timeout_never_fires_while_the_user_speaks() -> None:
    assert run([SpeechStarted(0.0), 100.0]) == [started(0.0, "vad")]


def test_stop_timeout_runs_from_turn_start_without_vad() -> None:
    stop = [SilenceAndTranscriptTurnStop()]
    out = run([text("hel", 1.0, final=False), 10.0], stop=stop, timeout=2.0)
    assert out == [
        started(1.0, "transcription"),
        UserTurnStopTimeout(t=3.0),
        UserTurnStopped(t=3.0, strategy="timeout"),
    ]


def test_a_timer_due_before_an_event_fires_first() -> None:
    script = [SpeechStarted(0.0), text("hi", 0.5), SpeechStopped(1.0), SpeechStarted(3.0)]
    assert run(script) == [
        started(0.0, "vad"),
        UserTurnStopped(t=1.6, strategy="speech_timeout"),
        started(3.0, "vad"),
    ]


# -- audio idle -------------------------------------------------------------------------------


def test_audio_idle_mid_speech_lets_the_turn_stop() -> None:
    script = [SpeechStarted(0.0), text("book a table", 1.5), AudioIdle(2.0), 10.0]
    assert run(script)[1:] == [UserTurnStopped(t=2.6, strategy="speech_timeout")]


def test_audio_idle_followed_by_the_vads_own_stop_counts_once() -> None:
    # pipeline.hearing.vad reports AudioIdle(now) then SpeechStopped(speech end).
    script = [SpeechStarted(0.0), text("book a table", 1.5), AudioIdle(2.0), SpeechStopped(1.4)]
    assert run([*script, 10.0])[1:] == [UserTurnStopped(t=2.6, strategy="speech_timeout")]


def test_audio_idle_without_text_falls_back_to_the_stop_timeout() -> None:
    script = [SpeechStarted(0.0), AudioIdle(2.0), 10.0]
    assert run(script)[1:] == [
        UserTurnStopTimeout(t=7.0),
        UserTurnStopped(t=7.0, strategy="timeout"),
    ]


def test_without_audio_idle_a_dead_mic_keeps_the_turn_open() -> None:
    assert run([SpeechStarted(0.0), text("book a table", 1.5), 100.0]) == [started(0.0, "vad")]


def test_audio_idle_when_the_user_is_silent_is_ignored() -> None:
    out: list[Event] = []
    controller = UserTurnController([VADTurnStart()], [SpeechTimeoutTurnStop()], emit=out.append)
    play(controller, [AudioIdle(1.0), 10.0])
    assert out == []
    assert controller.next_deadline() is None


# -- controller state -------------------------------------------------------------------------


def test_controller_reports_state_and_next_deadline() -> None:
    out: list[Event] = []
    controller = UserTurnController([VADTurnStart()], [SpeechTimeoutTurnStop()], emit=out.append)
    play(controller, [BotStartedSpeaking(0.0), SpeechStarted(1.0)])
    assert (controller.turn_active, controller.user_speaking, controller.bot_speaking) == (
        True,
        True,
        True,
    )
    assert controller.next_deadline() is None
    play(controller, [text("hi", 1.5), SpeechStopped(2.0)])
    assert controller.next_deadline() == pytest.approx(2.6)
    play(controller, [2.6])
    assert not controller.turn_active
    assert controller.next_deadline() is None
    assert controller.now == 2.6


def test_controller_needs_strategies_and_a_positive_timeout() -> None:
    with pytest.raises(ValueError):
        UserTurnController([], [SpeechTimeoutTurnStop()], emit=print)
    with pytest.raises(ValueError):
        UserTurnController(
            [VADTurnStart()], [SpeechTimeoutTurnStop()], emit=print, user_turn_stop_timeout=0
        )


def test_a_second_turn_starts_fresh() -> None:
    script = [
        SpeechStarted(0.0),
        text("hi", 0.5),
        SpeechStopped(1.0),
        5.0,
        SpeechStarted(6.0),
        SpeechStopped(7.0),
        7.6,
    ]
    # The first turn's text does not count for the second: no stop at 7.6.
    assert run(script) == [
        started(0.0, "vad"),
        UserTurnStopped(t=1.6, strategy="speech_timeout"),
        started(6.0, "vad"),
    ]
