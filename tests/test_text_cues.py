"""How a transcript ends: unfinished, a question, or a statement."""

from __future__ import annotations

import pytest

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
