"""What the words say about whether the user is done: how a transcript ends.

Three classes, from grammar rather than from any one sentence:

- ``UNFINISHED``: the last word needs something after it. A coordinating or
  subordinating conjunction ("and", "so", "because"), a preposition ("for", "to"), an
  article or determiner ("the", "my"), a filler ("um", "uh"), an infinitive "to", a verb
  that takes two objects with only the first ("can you tell me", "show us"); or the
  turn ends with a comma, a dash or an ellipsis (Whisper writes "..." when speech breaks
  off); or the whole turn so far is a preface that announces more ("I was wondering
  about something", "the thing is", "let me think").
- ``QUESTION``: ends with a question mark and is not unfinished. A strong cue that the
  user is done.
- ``STATEMENT``: anything else with words; whether it is finished is left to the model
  and the silence.

A preposition at the very end of a question that opens with a wh-word is not dangling
("Which platform does it leave from?": the wh-word is its object), and a particle ("in",
"off", "up") ends finished sentences as often as unfinished ones: such turns count as
statements, neither complete nor unfinished, and the audio decides.
"""

from __future__ import annotations

import re
from enum import Enum


class Ending(Enum):
    UNFINISHED = "unfinished"
    QUESTION = "question"
    STATEMENT = "statement"


# Only words that almost never end a finished sentence: "so" ends "I think so", "then"
# ends "see you then", "off" ends "turn it off", "this" ends "can you read this?", so
# they are not here (or, for "so", excepted after the verbs it completes).
CONJUNCTIONS = frozenset(
    "and but or nor so because cause although unless until whereas if whether than plus".split()
)
PREPOSITIONS = frozenset(
    "about against among at between beyond despite during except for from into like of "
    "onto per till to toward towards unlike upon via with".split()
)
DETERMINERS = frozenset("a an the my your our their every".split())
FILLERS = frozenset("um umm uhm uh uhh erm er hmm".split())
# Verbs that take a person and a thing: with only the person, the thing is still to come.
DITRANSITIVE = frozenset("tell show give send bring teach lend hand pass offer".split())
_PERSONS = frozenset("me us him her them".split())
_SO_COMPLETES = frozenset(
    "think thought hope guess believe suppose said say says told do did does not".split()
)
DANGLING = CONJUNCTIONS | PREPOSITIONS | DETERMINERS | FILLERS
# Words that end a finished sentence as a particle ("can I come in?", "turn it off") as
# often as they start an unfinished phrase ("what's the weather like in ..."): a question
# ending in one is no strong cue either way.
PARTICLES = frozenset(
    "in on off out up down over around by through along across after before inside "
    "outside behind above below near under within without back away".split()
)

# A turn made only of a preface: the speaker has announced what comes next. Matched
# against the whole turn (lowercase, no punctuation), so "I was wondering about the
# time?" is not one.
_LEAD = r"(?:(?:so|well|okay|ok|um|uh|and|hey) )*"
PREFACES = (
    r"(?:i was|i am|i'm) (?:just )?wondering(?: about (?:something|this|that))?",
    r"(?:i have|i had|i've got|i got) a (?:quick )?question(?: for you)?",
    r"(?:a )?quick question",
    r"i (?:want|wanted|would like|'d like|need) to (?:ask|know)(?: you)?(?: (?:about )?something)?",
    r"i'd like to (?:ask|know)(?: you)?(?: (?:about )?something)?",
    r"let me (?:think|see|ask(?: you)?)",
    r"(?:the|my) (?:thing|question|problem|issue|point) is",
    r"(?:here's|here is) (?:the thing|what i (?:want|need))",
    r"what i (?:want|need|wanted|meant)(?: to (?:know|ask|say))? is",
)
_PREFACE = re.compile(rf"^{_LEAD}(?:{'|'.join(PREFACES)})$")
_WH = frozenset("what which who whom whose where when how".split())
_WORD = re.compile(r"[a-z0-9']+")
_TRAILING_BREAK = ("...", "…", ",", "-", "—", ";", ":")


def ending(text: str) -> Ending | None:
    """How ``text`` ends; ``None`` when it holds no words."""
    stripped = text.strip()
    words = _WORD.findall(stripped.lower().replace("\u2019", "'"))  # curly apostrophe
    if not words:
        return None
    if stripped.endswith(_TRAILING_BREAK) or _PREFACE.match(" ".join(words)):
        return Ending.UNFINISHED
    question = stripped.endswith("?")
    last = words[-1]
    if last == "so" and len(words) > 1 and words[-2] in _SO_COMPLETES:
        return Ending.QUESTION if question else Ending.STATEMENT
    if last in DANGLING:
        stranded = question and last in PREPOSITIONS and words[0] in _WH
        return Ending.STATEMENT if stranded else Ending.UNFINISHED
    if last in _PERSONS and len(words) > 1 and words[-2] in DITRANSITIVE:
        return Ending.UNFINISHED
    if last in PARTICLES:
        return Ending.STATEMENT
    return Ending.QUESTION if question else Ending.STATEMENT
