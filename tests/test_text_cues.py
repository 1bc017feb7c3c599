"""How a transcript ends: unfinished, a question, or a statement (English; the other
languages are in ``test_text_cues_languages.py``)."""

from __future__ import annotations

import pytest
from loguru import logger

from pipeline.turns import languages
from pipeline.turns.text_cues import Ending, ending


@pytest.mark.parametrize(
    "text",
    [
        "Could you book a table for",
        "Could you book a table for?",  # Whisper puts "?" on a cut-off question
        "I need to get to the airport and",
        "My flight leaves at 9 so.",
        "I can't come on Monday because",
        "Can you play the",
        "I'd like to order, um",
        "What is the weather like in...",  # Whisper's trailing ellipsis
        "The thing is",
        "So what I want to know is",
        "I was wondering about something.",
        "Okay so I have a quick question",
        "Let me think.",
        "I wanted to ask you",
        "Can you tell me?",  # a person and no thing
        "Show us",
        "First,",
    ],
)
def test_unfinished(text: str) -> None:
    assert ending(text) is Ending.UNFINISHED


@pytest.mark.parametrize(
    "text",
    [
        "What time does the museum open?",
        "Could you book a table for two people on Friday?",
        "Can you remind me to call my sister at 6?",  # digits are words
        "Do you think so?",
        "Can you help me?",  # help takes one object: nothing missing
        "Is it\u2019s open today?",  # a curly apostrophe
    ],
)
def test_questions(text: str) -> None:
    assert ending(text) is Ending.QUESTION


@pytest.mark.parametrize(
    "text",
    [
        "Set a timer for ten minutes.",
        "I think so.",  # "so" completes these verbs
        "Turn the lights off.",  # a particle, not a dangling preposition
        "Can I come in?",  # a question ending in a particle is no strong cue
        "Which platform does the next train leave from?",  # stranded by the wh-word
        "I was wondering about the opening hours of the museum",  # a preface, then more
        "Tell me a joke about cats.",
    ],
)
def test_statements(text: str) -> None:
    assert ending(text) is Ending.STATEMENT


@pytest.mark.parametrize("text", ["", "   ", "...", "?!"])
def test_no_words(text: str) -> None:
    assert ending(text) is None


# What a telephony or streaming recognizer returns: lower case, no mark, maybe a period.
@pytest.mark.parametrize(
    "text",
    [
        "can you tell me what the answer is",
        "Can you tell me what the answer is.",
        "is there a bank near the hotel",
        "do i need a reservation for dinner",
        "how do i reset my password",
        "are you open on christmas day",
        "where is the closest gas station",
        "who won the game last night",
        "should i take an umbrella tomorrow",
        "what does the word serendipity mean",
        "will it snow this weekend",
        "why is the sky blue",
        "how much is it",
        "how are you",
        "does it hurt",
        "have you seen my keys",
        "what if it rains",
        "do you know where the station is",  # the copula ends an embedded clause
        "so can you help me",  # lead-ins
        "okay what time is it",
        "excuse me where is the toilet",
        "hey is the store open",
        "could you please help me",
        "I lost my card, can you block it",  # the last clause asks
    ],
)
def test_questions_by_their_form(text: str) -> None:
    assert ending(text) is Ending.QUESTION


@pytest.mark.parametrize(
    "text",
    [
        "you're open on sundays right",
        "You're open on Sundays, right.",
        "it's nice isn't it",
        "you like coffee don't you",
        "we meet at six okay",
        "you close at nine correct",
        "you're coming or not",
    ],
)
def test_flat_tags_are_questions(text: str) -> None:
    assert ending(text) is Ending.QUESTION


@pytest.mark.parametrize(
    "text",
    [
        "what I want is a pizza",  # a relative clause
        "when you get there call me",
        "what a day",  # exclamations
        "how nice",
        "how about tomorrow",  # a suggestion
        "can't wait",  # imperatives and answers that start like questions
        "do it",
        "do your best",
        "will do",
        "have a nice day",
        "tell me a joke",  # a request: a statement is fine
        "turn right",  # "right", "okay", "correct" that end the statement itself
        "that's right",
        "that's okay",
        "that's correct",
        "where is",  # a question's opening without its body
        "what time is",
        "can you",
        "could you please",
        "is it",
        "why don't you",
        "i lost my card can you block it",  # no mark between the two: not read
        "what's the weather like in",  # a particle: no cue either way
        "which platform does it leave from",  # stranded after a wh-word, bare
        "what can you tell me",  # the wh-word is the thing told
    ],
)
def test_false_and_unfinished_questions_are_statements(text: str) -> None:
    assert ending(text) is Ending.STATEMENT


@pytest.mark.parametrize(
    "text",
    [
        "can you tell me",  # bare, the thing still to come
        "is there a way to",
        "do you know if",
        "where is um",
        "could you book a table for",
        "so what I want to know is",
        "can you play the",
    ],
)
def test_unfinished_words_win_over_a_question_form(text: str) -> None:
    assert ending(text) is Ending.UNFINISHED


def test_a_language_without_cues_reads_punctuation_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(languages, "_warned", set())  # whatever ran before
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="INFO")
    try:
        assert ending("Come stai?", "it") is Ending.QUESTION
        assert ending("come stai", "it") is Ending.STATEMENT
        assert ending("vorrei prenotare un tavolo per,", "it") is Ending.UNFINISHED
        assert ending("vorrei un caffè e...", "it") is Ending.UNFINISHED
        assert ending("vorrei un caffè e", "it") is Ending.STATEMENT
        assert ending("", "it") is None
    finally:
        logger.remove(sink)
    assert sum("no turn cues for language 'it'" in line for line in lines) == 1


@pytest.mark.parametrize("language", ["", "zz", "en-US", "English", "EN"])
def test_any_language_code_is_read_without_raising(language: str) -> None:
    assert ending("can you help me", language) in (Ending.QUESTION, Ending.STATEMENT)


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("My number is 415.", "en"),
        ("My phone number is 415 555.", "en"),
        ("The account number is four one five", "en"),
        ("My PIN is 12", "en"),
        ("Mi número es 415.", "es"),
        ("Mon numéro, c'est le 06 12.", "fr"),
        ("Meine Telefonnummer ist 0176.", "de"),
    ],
)
def test_a_number_read_out_in_groups_is_unfinished_until_it_is_whole(
    text: str, language: str
) -> None:
    assert ending(text, language) is Ending.UNFINISHED


@pytest.mark.parametrize(
    "text",
    [
        "My number is 415 555 0199.",  # ten digits: a whole phone number
        "I am 42.",  # digits, but no number was announced
        "I would like two tickets",
        "Is my number 415?",  # a question about it
        "My number is 415 and that is it.",  # the digits are not where it ends
    ],
)
def test_digits_that_are_not_a_number_being_read_out(text: str) -> None:
    assert ending(text) is not Ending.UNFINISHED
