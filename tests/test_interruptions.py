"""Judging speech over the bot: backchannels, noise and echo resume, the rest interrupts."""

from __future__ import annotations

import pytest

from pipeline.events import SpeechStarted, SpeechStopped, Transcription
from pipeline.interruptions.judge import (
    InterruptionDecider,
    InterruptionParams,
    Verdict,
    is_echo,
    normalise,
)
from pipeline.turns.languages import backchannels

PARAMS = InterruptionParams()


@pytest.mark.parametrize(
    "text",
    ["Mhm.", "Uh-huh.", "Yeah.", "Okay.", "Right, right.", "Sure.", "I see.", "Oh, I see.",
     "Yeah yeah yeah", "Okay, got it.", "mm-hmm", "All right."],
)  # fmt: skip
def test_backchannels(text: str) -> None:
    assert PARAMS.is_backchannel(text)


@pytest.mark.parametrize(
    "text",
    ["Wait, stop.", "Okay, but what about tomorrow?", "Really?", "No.",
     "Yeah, I mean the other one.", "", "Hold on a second."],
)  # fmt: skip
def test_not_backchannels(text: str) -> None:
    assert not PARAMS.is_backchannel(text)


def test_the_list_is_a_setting() -> None:
    params = InterruptionParams(backchannels=("bien", "d'accord"))
    assert params.is_backchannel("D'accord, d'accord.") and not params.is_backchannel("Okay.")


@pytest.mark.parametrize(
    ("language", "heard", "other"),
    [("es", "¡Sí, sí! Claro.", "¿Sí? ¿Y el precio?"),
     ("fr", "Ah bon. D\u2019accord.", "Non, pas ça."),
     ("de", "Ja, genau. Alles klar.", "Ja, aber später."),
     ("en", "Mm-hmm, right.", "Ja.")],
)  # fmt: skip
def test_each_languages_backchannels_keep_their_accents(
    language: str, heard: str, other: str
) -> None:
    # Accented letters are letters: "sí" stays "sí", not "s" (and not any "s").
    params = InterruptionParams(backchannels=backchannels(language))
    assert params.is_backchannel(heard) and not params.is_backchannel(other)
    assert normalise("¿Sí? ¡Ähm, Straße!") == "sí ähm strasse"


def test_normalise_and_echo() -> None:
    assert normalise("Uh-huh, OK!") == "uh huh ok"
    said = "Once upon a time there was a small robot who lived in a lighthouse."
    assert is_echo("a small robot who lived", said, 0.6)
    assert is_echo("there was a small rowboat", said, 0.6)  # mostly its words
    assert not is_echo("what about the weather", said, 0.6)
    assert not is_echo("robot", said, 0.6)  # one word proves nothing


def judge(*events: object, bot_words: str = "", now: float | None = None) -> Verdict | None:
    decider = InterruptionDecider()
    decider.bot_words = bot_words
    decider.start(onset=10.0)
    verdict = None
    for event in events:
        verdict = decider.handle(event) or verdict  # type: ignore[arg-type]
    if now is not None and verdict is None:
        verdict = decider.advance(now)
    if verdict is not None:
        assert not decider.pending
    return verdict


def test_a_backchannel_resumes_once_its_words_are_in() -> None:
    assert judge(SpeechStopped(10.4), Transcription("Mhm.", 10.7)) is Verdict.RESUME


def test_words_that_are_more_interrupt() -> None:
    assert judge(SpeechStopped(10.6), Transcription("Wait, stop.", 10.9)) is Verdict.INTERRUPT


def test_no_words_resume_an_empty_transcript_at_once_or_silence_after_the_timeout() -> None:
    assert judge(SpeechStopped(10.3), Transcription("", 10.5)) is Verdict.RESUME  # a cough
    assert judge(SpeechStopped(10.3), now=11.2) is None  # still waiting for words
    assert judge(SpeechStopped(10.3), now=11.3) is Verdict.RESUME  # none came


def test_speech_that_goes_on_interrupts_without_waiting_for_words() -> None:
    assert judge(now=10.9) is None
    assert judge(now=11.0) is Verdict.INTERRUPT
    # A second stretch of speech re-arms the length check from the first onset.
    events = (SpeechStopped(10.4), SpeechStarted(10.5))
    assert judge(*events, now=11.0) is Verdict.INTERRUPT


def test_the_words_of_every_utterance_count() -> None:
    events = (
        SpeechStopped(10.3), SpeechStarted(10.4), SpeechStopped(10.7),
        Transcription("Yeah.", 10.8),  # the first utterance's
    )  # fmt: skip
    assert judge(*events) is None  # the second one's words are still coming
    assert judge(*events, Transcription("Tell me more about that.", 11.0)) is Verdict.INTERRUPT


def test_the_bots_own_words_coming_back_resume() -> None:
    words = "It polished the great lamp until it shone like a star."
    heard = Transcription("The great lamp until it shone", 10.9)
    assert judge(SpeechStopped(10.6), heard, bot_words=words) is Verdict.RESUME
    assert judge(SpeechStopped(10.6), heard, bot_words="") is Verdict.INTERRUPT


def test_params_are_checked() -> None:
    with pytest.raises(ValueError):
        InterruptionParams(max_backchannel_seconds=0)
    with pytest.raises(ValueError):
        InterruptionParams(echo_overlap=1.5)
