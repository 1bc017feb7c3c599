"""Sentence aggregation: early first clause, whole sentences after, no false splits."""

from __future__ import annotations

import pytest

from pipeline.reply.sentences import SentenceAggregator


def split(text: str, step: int = 3) -> list[str]:
    """Feed ``text`` in ``step``-character chunks, as a token stream would arrive."""
    agg = SentenceAggregator()
    out: list[str] = []
    for i in range(0, len(text), step):
        out += agg.push(text[i : i + step])
    tail = agg.flush()
    return [*out, tail] if tail else out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello there. How are you?", ["Hello there.", "How are you?"]),
        ("It costs 3.5 dollars. Cheap!", ["It costs 3.5 dollars.", "Cheap!"]),
        ("Use e.g. a hammer. Or not.", ["Use e.g. a hammer.", "Or not."]),
        ("Ask Dr. Smith today. He knows.", ["Ask Dr. Smith today.", "He knows."]),
        ("Read J. R. R. Tolkien now. Good.", ["Read J. R. R. Tolkien now.", "Good."]),
        ("See example.com. It helps.", ["See example.com.", "It helps."]),
        ("Mail bob@example.com today. Thanks.", ["Mail bob@example.com today.", "Thanks."]),
        ("Go to https://a.b/c?d=1. Then stop.", ["Go to https://a.b/c?d=1.", "Then stop."]),
        ("Wait... what? Really!", ["Wait... what?", "Really!"]),
        ("Sure, I can help.", ["Sure, I can help."]),
        ("Well, let me think about that, okay. Yes.",
         ["Well, let me think about that,", "okay.", "Yes."]),
        ("Version 2. is out", ["Version 2. is out"]),
        ("No end", ["No end"]),
        ("", []),
    ],
)  # fmt: skip
def test_table(text: str, expected: list[str]) -> None:
    assert split(text) == expected
    assert split(text, step=1) == expected


def test_first_sentence_is_released_as_soon_as_the_next_word_starts() -> None:
    agg = SentenceAggregator()
    assert agg.push("Hello there.") == []
    assert agg.push(" ") == []
    assert agg.push("H") == ["Hello there."]
    assert agg.flush() == "H"


def test_clause_split_only_for_the_first_piece_of_an_answer() -> None:
    agg = SentenceAggregator()
    out = agg.push("First of all, you know, this is long, and then some. ")
    out += agg.push("After that, we go on, and on. X")
    assert out == [
        "First of all, you know,",
        "this is long, and then some.",
        "After that, we go on, and on.",
    ]
    agg.flush()
    assert agg.push("Next answer starts here, again and again. X") == [
        "Next answer starts here,",
        "again and again.",
    ]


def stream_through(agg: SentenceAggregator, tokens: list[str]) -> list[str]:
    out: list[str] = []
    for token in tokens:
        out += agg.push(token)
    return out


@pytest.mark.parametrize("word", [" word", " e.g.", " v2. and"])
def test_a_long_answer_without_boundaries_is_scanned_once(word: str) -> None:
    """20k tokens that never end a sentence (no marks; abbreviations; periods before
    lower case): each push searches only its own text, the character before it and the
    spaces after a mark (at most twice each)."""
    agg = SentenceAggregator()
    tokens = [f"{word}{n % 10}" for n in range(20000)]
    assert stream_through(agg, tokens) == []
    assert agg.scanned <= 2 * sum(len(t) + 1 for t in tokens)  # linear, not quadratic
    assert agg.flush() == "".join(tokens).strip()


def test_a_mark_waiting_for_its_next_word_does_not_rescan_the_spaces() -> None:
    agg = SentenceAggregator()
    tokens = ["Hello there, my friend. ", *[" "] * 5000, "Next", " one."]
    out = stream_through(agg, tokens)
    assert out == ["Hello there, my friend."]
    assert agg.scanned <= 2 * sum(len(t) + 1 for t in tokens)
    assert agg.flush() == "Next one."


def test_sentences_far_into_a_long_answer_are_still_found() -> None:
    agg = SentenceAggregator()
    body = [" and on"] * 5000
    out = stream_through(agg, ["It goes", *body, ". Then", " it stops. ", "Done"])
    assert out == ["It goes" + "".join(body) + ".", "Then it stops."]
    assert agg.flush() == "Done"
