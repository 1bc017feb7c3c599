"""What the words say about whether the user is done: how a transcript ends.

Three classes, from grammar rather than from any one sentence:

- ``UNFINISHED``: the last word needs something after it, or the turn is reading out a
  number it announced and has fewer digits than a phone number ("my number is 415"). A
  coordinating or subordinating conjunction ("and", "so", "because"), a preposition ("for",
  "to"), an article or determiner ("the", "my"), a filler ("um", "uh"), an infinitive "to",
  a verb that takes two objects with only the first ("can you tell me", "show us"); or the
  turn ends with a comma, a dash or an ellipsis (Whisper writes "..." when speech breaks
  off); or the whole turn so far is a preface that announces more ("I was wondering about
  something", "the thing is", "let me think").
- ``QUESTION``: a question that is not unfinished: it ends with a question mark, or
  has a question's form (:mod:`pipeline.turns.question_form`: "can you tell me what the
  answer is", "¿dónde está la estación", "…, n'est-ce pas", "kannst du mir helfen"). A
  strong cue that the user is done.
- ``STATEMENT``: anything else with words; whether it is finished is left to the model
  and the silence.

A preposition at the very end of a question that opens with a wh-word is not dangling
("Which platform does it leave from?": the wh-word is its object), and a particle ("in",
"off", "up"; German "an", "aus") ends finished sentences as often as unfinished ones:
such turns count as statements, neither complete nor unfinished, and the audio decides.
So does a tag that is also a conjunction (German "oder") when nothing marks it a tag.

The words are each language's (:mod:`pipeline.turns.languages`: English, Spanish, French,
German). In a language without them only the marks count: a trailing comma, dash or
ellipsis is unfinished, a "?" a question.
"""

from __future__ import annotations

from enum import Enum

from pipeline.turns.languages import CueWords, cue_words
from pipeline.turns.question_form import Form, Words, question_form, split


class Ending(Enum):
    UNFINISHED = "unfinished"
    QUESTION = "question"
    STATEMENT = "statement"


# Digits enough for a whole phone number (ten in North America, ten or more in Europe).
WHOLE_NUMBER = 10
_TRAILING_BREAK = ("...", "\u2026", ",", "-", "\u2014", ";", ":")
_CLOSERS = "\"'\u201d\u2019\u00bb) "  # after a "?": quotes, brackets


def ending(text: str, language: str = "en") -> Ending | None:
    """How ``text`` ends in ``language`` (an ISO 639-1 code); ``None`` when it holds no
    words."""
    stripped = text.strip()
    split_words = split(stripped)
    if not split_words.words:
        return None
    if stripped.endswith(_TRAILING_BREAK):
        return Ending.UNFINISHED
    marked = stripped.rstrip(_CLOSERS).endswith("?")
    cues = cue_words(language)
    if cues is None:
        return Ending.QUESTION if marked else Ending.STATEMENT
    if cues.preface.match(" ".join(split_words.words)):
        return Ending.UNFINISHED
    if not marked and _reading_a_number(split_words.words, cues):
        return Ending.UNFINISHED
    form = question_form(split_words, cues)
    return _by_last_words(split_words, cues, form, marked)


def _reading_a_number(words: list[str], cues: CueWords) -> bool:
    """The turn ends in the digits of a number it announced ("my number is 415 555"), with
    fewer than a whole phone number's: people read numbers out in groups, pausing."""
    digits, i = 0, len(words)
    while i > 0 and (words[i - 1].isdigit() or words[i - 1] in cues.digit_words):
        i -= 1
        digits += len(words[i]) if words[i].isdigit() else 1
    if not 0 < digits < WHOLE_NUMBER:
        return False
    return any(word in cues.number_nouns for word in words[:i])


def _by_last_words(split_words: Words, cues: CueWords, form: Form, marked: bool) -> Ending:
    words = split_words.words
    last, before = words[-1], words[-2] if len(words) > 1 else ""
    question = Ending.QUESTION if marked or form.question else Ending.STATEMENT
    if before in cues.completes.get(last, ()):
        return question  # "I think so"
    if form.tag and last in cues.dangling:
        # "…, oder?" is a tag; a bare "… oder" may go on ("Kaffee oder Tee").
        tagged = marked or len(words) - 1 in split_words.breaks
        return Ending.QUESTION if tagged else Ending.STATEMENT
    if last in cues.dangling and len(words) - 1 not in split_words.attached:
        stranded = form.wh and last in cues.prepositions
        return Ending.STATEMENT if stranded else Ending.UNFINISHED
    if any(tuple(words[-len(tail) :]) == tail for tail in cues.tails):
        # "tell me": the thing is to come, unless a wh-word was it ("what can you tell me").
        return Ending.STATEMENT if form.wh else Ending.UNFINISHED
    if last in cues.particles:
        return Ending.STATEMENT
    return question
