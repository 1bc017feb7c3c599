"""The adaptive turn-end rule on scripted timelines: model, words and silence together.

Every script: speech from 0.0 to 1.0 s; the VAD reports the stop at 1.2 s (its 0.2 s
window), then the transcript and the model's score come in.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pipeline.events import (
    BotStartedSpeaking,
    Event,
    SpeechFalseStart,
    SpeechOnset,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    TurnEndScore,
    UserTurnEndPredicted,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.turns import MinWordsTurnStart, UserTurnController, VADTurnStart
from pipeline.turns.stop_adaptive import AdaptiveStopParams, AdaptiveTurnStop
from pipeline.turns.text_cues import Ending
from testkit.turn_script import Step, play, rounded

PARAMS = AdaptiveStopParams()
SPEECH = [SpeechStarted(0.0), 1.2, SpeechStopped(1.0)]


def said(text: str, t: float) -> Transcription:
    return Transcription(text, t)


def score(p: float, t: float, speech_end: float = 1.0) -> TurnEndScore:
    return TurnEndScore(t, p, speech_end)


def run(script: Sequence[Step], lead: float = 0.3, **params: object) -> list[Event]:
    out: list[Event] = []
    stop = AdaptiveTurnStop(AdaptiveStopParams(**params), lead=lambda: lead)  # type: ignore[arg-type]
    controller = UserTurnController([VADTurnStart()], [stop], emit=out.append)
    play(controller, script)
    return rounded(out, 6)


def stops(events: list[Event]) -> list[float]:
    return [e.t for e in events if isinstance(e, UserTurnStopped)]


def predictions(events: list[Event]) -> list[float]:
    return [e.t for e in events if isinstance(e, UserTurnEndPredicted)]


def test_a_question_the_model_calls_done_ends_once_words_and_score_are_in() -> None:
    out = run([*SPEECH, 1.24, score(0.97, 1.24), 1.26, said("What time is it?", 1.26), 5.0])
    assert stops(out) == [1.26]
    assert out[0] == UserTurnStarted(0.0, "vad", True)
    assert out[-1] == UserTurnStopped(1.26, "adaptive")


@pytest.mark.parametrize(
    ("words", "p", "wait"),
    [
        ("What time is it?", 0.1, PARAMS.question_wait[1]),  # the model disagrees
        ("Set a timer for ten minutes.", 0.95, PARAMS.statement_wait[0]),
        ("Set a timer for ten minutes.", 0.1, PARAMS.statement_wait[1]),
        ("Set a timer for ten minutes.", 0.6, 0.95),  # unsure: halfway between
        ("Could you book a table for", 0.99, PARAMS.max_wait),  # the words are unfinished
    ],
)
def test_the_wait_follows_the_cues(words: str, p: float, wait: float) -> None:
    out = run([*SPEECH, 1.24, score(p, 1.24), 1.26, said(words, 1.26), 5.0])
    assert stops(out) == [pytest.approx(1.0 + wait, abs=1e-6)]


def test_wait_table() -> None:
    assert PARAMS.wait(0.9, Ending.QUESTION) == PARAMS.question_wait[0]
    assert PARAMS.wait(0.3, Ending.QUESTION) == PARAMS.question_wait[1]
    assert PARAMS.wait(0.0, Ending.STATEMENT) == PARAMS.statement_wait[1]
    assert PARAMS.wait(1.0, Ending.UNFINISHED) == PARAMS.max_wait
    assert PARAMS.wait(0.5, None) == pytest.approx(
        PARAMS.statement_wait[0]
        + (0.4 / 0.6) * (PARAMS.statement_wait[1] - PARAMS.statement_wait[0])
    )
    capped = AdaptiveStopParams(statement_wait=(0.5, 3.0), max_wait=2.0)
    assert capped.wait(0.0, Ending.STATEMENT) == 2.0


def test_never_before_the_words_are_in() -> None:
    # The model says done at once, the words take 1.5 s: the turn waits for them.
    out = run([*SPEECH, 1.25, score(0.99, 1.25), 2.7, said("What time is it?", 2.7), 5.0])
    assert stops(out) == [2.7]


def test_an_utterance_without_words_counts_as_in() -> None:
    # Words in the first utterance; a cough after them transcribes to nothing.
    script = [
        SpeechStarted(0.0), 1.2, SpeechStopped(1.0), said("What time is it?", 1.25),
        SpeechStarted(1.4), 1.8, SpeechStopped(1.6), 1.85, score(0.95, 1.85, 1.6),
        1.9, said("", 1.9), 5.0,
    ]  # fmt: skip
    assert stops(run(script)) == [1.9]


def test_a_late_model_is_not_waited_for() -> None:
    # No score by score_timeout after the stop was seen (1.2 + 0.35): no_score (0.5) is used.
    out = run([*SPEECH, 1.26, said("What time is it?", 1.26), 5.0])
    expected = 1.0 + PARAMS.wait(PARAMS.no_score, Ending.QUESTION)
    assert stops(out) == [pytest.approx(max(1.55, expected), abs=1e-6)]


def test_a_score_of_an_earlier_pause_is_ignored() -> None:
    script = [
        *SPEECH, 1.26, said("Set a timer for ten minutes.", 1.26),
        1.3, score(0.99, 1.3, speech_end=0.5), 5.0,
    ]  # fmt: skip
    # Without a score for this pause: no_score after the timeout, not the stale 0.99.
    assert stops(run(script)) == [pytest.approx(1.0 + PARAMS.wait(0.5, Ending.STATEMENT))]


def test_speech_resuming_cancels_the_end_and_the_turn_goes_on() -> None:
    script = [
        *SPEECH, 1.24, score(0.3, 1.24), 1.26, said("Set a timer", 1.26),
        1.7, SpeechOnset(1.7), 1.9, SpeechStarted(1.7), 3.2, SpeechStopped(3.0),
        3.24, score(0.95, 3.24, speech_end=3.0), 3.26, said("for ten minutes.", 3.26), 6.0,
    ]  # fmt: skip
    out = run(script)
    assert stops(out) == [pytest.approx(3.0 + PARAMS.statement_wait[0])]
    assert [type(e) for e in out].count(UserTurnStarted) == 1


def test_a_possible_onset_holds_the_end_until_it_is_decided() -> None:
    # The end is due at 1.7 (statement, done); at 1.65 the VAD hears something.
    script = [
        *SPEECH, 1.24, score(0.95, 1.24), 1.26, said("Set a timer for ten minutes.", 1.26),
        1.65, SpeechOnset(1.65), 2.0,
    ]  # fmt: skip
    assert stops(run(script)) == []  # still held at 2.0
    # It was a real start: the turn goes on.
    assert stops(run([*script, SpeechStarted(1.65), 3.0])) == []
    # It was not speech: a false start restarts the silence from its onset.
    out = run([*script, SpeechFalseStart(1.8), 5.0])
    assert stops(out) == [pytest.approx(1.65 + PARAMS.statement_wait[0])]


def test_a_false_start_never_stretches_past_the_maximum() -> None:
    script = [
        *SPEECH, 1.24, score(0.1, 1.24), 1.26, said("Set a timer for ten minutes.", 1.26),
        2.1, SpeechOnset(2.1), 2.25, SpeechFalseStart(2.25), 6.0,
    ]  # fmt: skip
    assert stops(run(script)) == [pytest.approx(1.0 + PARAMS.max_wait)]


def test_the_end_is_predicted_lead_seconds_before_it_comes() -> None:
    out = run([*SPEECH, 1.24, score(0.95, 1.24), 1.26, said("Set a timer.", 1.26), 5.0], lead=0.3)
    end = 1.0 + PARAMS.statement_wait[0]
    assert predictions(out) == [pytest.approx(end - 0.3)]
    assert stops(out) == [pytest.approx(end)]


def test_a_prediction_due_already_comes_with_the_words_and_only_once() -> None:
    script = [*SPEECH, 1.24, score(0.95, 1.24), 1.26, said("Set a timer.", 1.26), 5.0]
    out = run(script, lead=1.0)
    assert predictions(out) == [1.26]
    # An end that is due at once needs no prediction.
    assert predictions(run([*SPEECH, 1.24, score(0.97, 1.24), 1.26, said("Why?", 1.26), 5.0])) == []


def test_each_pause_gets_its_own_prediction() -> None:
    script = [
        *SPEECH, 1.24, score(0.95, 1.24), 1.26, said("Set a timer", 1.26),
        1.5, SpeechOnset(1.5), 1.7, SpeechStarted(1.5), 2.7, SpeechStopped(2.5),
        2.74, score(0.95, 2.74, speech_end=2.5), 2.76, said("for ten minutes.", 2.76), 5.0,
    ]  # fmt: skip
    out = run(script, lead=0.6)
    assert predictions(out) == [pytest.approx(1.26), pytest.approx(2.76)]
    assert stops(out) == [pytest.approx(2.5 + PARAMS.statement_wait[0])]


@pytest.mark.parametrize(
    "params",
    [
        {"confident": 0.3, "doubtful": 0.5},
        {"question_wait": (0.5, 0.2)},
        {"statement_wait": (-0.1, 1.0)},
        {"max_wait": 0.0},
    ],
)
def test_params_are_checked(params: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        AdaptiveStopParams(**params)  # type: ignore[arg-type]


def test_a_turn_begun_by_its_words_after_the_pause_still_ends() -> None:
    # A min-words start: the turn starts at the transcript, after the VAD's stop.
    out: list[Event] = []
    stop = AdaptiveTurnStop(lead=lambda: 0.3)
    controller = UserTurnController([MinWordsTurnStart(min_words=2)], [stop], emit=out.append)
    script = [
        BotStartedSpeaking(0.0), SpeechStarted(0.5), 1.7, SpeechStopped(1.5),
        1.8, said("Stop, stop, wait a second.", 1.8), 5.0,
    ]  # fmt: skip
    play(controller, script)
    assert [type(e) for e in out] == [UserTurnStarted, UserTurnEndPredicted, UserTurnStopped]
    # Counted from the words (the pause was not seen), the model's score never came.
    assert stops(rounded(out, 6)) == [
        pytest.approx(1.8 + PARAMS.wait(PARAMS.no_score, Ending.STATEMENT))
    ]


def test_the_words_are_the_whole_turns_in_its_language() -> None:
    # Two utterances, no punctuation: the question's form is in the first one.
    second = [SpeechStarted(1.5), 2.7, SpeechStopped(2.5), 2.74, score(0.97, 2.74, 2.5)]
    script = [*SPEECH, 1.26, said("can you tell me", 1.26), *second, 2.76]
    out = run([*script, said("what the answer is", 2.76), 5.0])
    assert stops(out) == [2.76]  # a question: no wait
    spanish = [*SPEECH, 1.24, score(0.97, 1.24), 1.26, said("puedes ayudarme con esto", 1.26)]
    assert stops(run([*spanish, 5.0])) == [pytest.approx(1.0 + PARAMS.statement_wait[0])]
    assert stops(run([*spanish, 5.0], language="es")) == [1.26]
    reported = Transcription("puedes ayudarme con esto", 1.26, language="es")
    assert stops(run([*spanish[:-1], reported, 5.0])) == [1.26]  # the STT said so
