"""Transcripts as words, and a question's form read from them."""

from __future__ import annotations

from pipeline.turns.languages import cue_words
from pipeline.turns.question_form import Form, question_form, split


def test_words_are_folded_and_sentences_found() -> None:
    words = split("Okay. ¿Dónde está la Straße? No sé…")
    assert words.words == ["okay", "dónde", "está", "la", "strasse", "no", "sé"]
    assert words.sentence == 5 and not words.opened  # the last sentence holds words
    opened = split("Hola, ¿a qué hora abre?")
    assert opened.sentence == 1 and opened.opened and opened.clause == 1


def test_apostrophes_stay_inside_words_and_hyphens_join() -> None:
    words = split("Qu\u2019est-ce que c'est, dis-le")
    assert words.words == ["qu'est", "ce", "que", "c'est", "dis", "le"]
    assert words.attached == {1, 5} and words.clause == 4


def test_the_last_clause_can_hold_the_question() -> None:
    en = cue_words("en")
    assert en is not None
    assert question_form(split("I lost my card, can you block it"), en).question
    assert question_form(split("Could you, if possible, send it tomorrow"), en).question
    assert not question_form(split("If it rains, we stay home"), en).question
    wh = question_form(split("Which, uh, platform does it leave from"), en)
    assert wh == Form(question=True, wh=True)
