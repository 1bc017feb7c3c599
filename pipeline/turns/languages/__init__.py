"""The words the turn cues read, per language: one module each (``en``, ``es``, ``fr``,
``de``), each a :class:`CueWords`.

A language's words say how its turns end (:mod:`pipeline.turns.text_cues`): which words
leave a sentence open (conjunctions, prepositions, articles, fillers, prefaces), which open
a question (interrogatives, verb-first forms) or close one (tags), and which short answers
only show the user is listening (backchannels, :mod:`pipeline.interruptions.judge`).

Every word is matched *folded* (:func:`fold`): NFC, lower case, typographic apostrophes
as ``'``, ``ß`` as ``ss`` (Swiss spelling, and what some recognizers write). Accents are
kept: Spanish "qué" asks, "que" does not.

A language with no module has no word cues: :func:`cue_words` returns None (and logs it
once), and the cues fall back to what punctuation says.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from types import MappingProxyType

from loguru import logger

CUE_LANGUAGES = ("en", "es", "fr", "de")

# What recognizers and clients call our languages besides their ISO 639-1 code.
_ALIASES = {
    "english": "en", "spanish": "es", "español": "es", "espanol": "es", "castellano": "es",
    "french": "fr", "français": "fr", "francais": "fr", "german": "de", "deutsch": "de",
}  # fmt: skip


def fold(text: str) -> str:
    """How words are compared: NFC, lower case, a typographic apostrophe (U+2019) as
    ``'``, ``ß`` as ``ss``."""
    text = unicodedata.normalize("NFC", text).lower()
    return text.replace("\u2019", "'").replace("\u02bc", "'").replace("ß", "ss")


def words(text: str) -> frozenset[str]:
    """A set of words written space-separated, folded."""
    return frozenset(fold(text).split())


def phrases(*items: str) -> tuple[tuple[str, ...], ...]:
    """Phrases of one or more words, folded."""
    return tuple(tuple(fold(item).split()) for item in items)


def canonical(code: str | None) -> str | None:
    """``code`` as one of :data:`CUE_LANGUAGES` ("es-MX", "Spanish" → "es"), else None."""
    if not code:
        return None
    folded = fold(code).strip().replace("_", "-")
    folded = _ALIASES.get(folded, folded.split("-")[0])
    return folded if folded in CUE_LANGUAGES else None


@dataclass(frozen=True, slots=True)
class Opener:
    """What must follow a question opener for the words to be a question: the next word
    one of ``only`` (None: any) and none of ``never``, then ``more`` words after it."""

    only: frozenset[str] | None = None
    never: frozenset[str] = frozenset()
    more: int = 0


@dataclass(frozen=True)
class CueWords:
    """One language's cue words (see the module docstring and each language's module)."""

    code: str
    conjunctions: frozenset[str]
    prepositions: frozenset[str]
    determiners: frozenset[str]
    fillers: frozenset[str]
    # End finished sentences as often as unfinished ones: no cue either way.
    particles: frozenset[str]
    # Prefaces: regular expressions over a whole turn (folded words, single spaces).
    prefaces: tuple[str, ...]
    # Openers dropped before a question's first word ("so", "excuse me"); fillers too.
    leads: tuple[tuple[str, ...], ...]
    wh: Mapping[tuple[str, ...], Opener]  # interrogatives ("what", "por qué")
    inversions: Mapping[tuple[str, ...], Opener]  # verb-first questions ("can you")
    subjects: frozenset[str]  # subject pronouns
    auxiliaries: frozenset[str]  # verbs that need another verb after them
    copulas: frozenset[str] = frozenset()
    embedders: frozenset[str] = frozenset()  # open an embedded clause ("… where it is")
    tags: Mapping[tuple[str, ...], frozenset[str]] = field(default_factory=dict)
    # A dangling word that is finished after one of these ("I think so").
    completes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Endings that promise an object still to come ("tell me", "dígame", "sag mir").
    tails: tuple[tuple[str, ...], ...] = ()
    wh_final: frozenset[str] = frozenset()  # interrogatives left in place ("tu fais quoi")
    wh_final_not_after: frozenset[str] = frozenset()
    skipped: frozenset[str] = frozenset()  # between verb and subject ("a-t-il")
    softeners: frozenset[str] = frozenset()  # words that add nothing ("please")
    backchannels: tuple[str, ...] = ()
    # A number being read out ("my number is 415 …"): what announces one, and digits
    # spoken as words ("four one five").
    number_nouns: frozenset[str] = frozenset()
    digit_words: frozenset[str] = frozenset()
    dangling: frozenset[str] = field(init=False)
    preface: re.Pattern[str] = field(init=False)
    # First word → (phrase, is a wh-opener, what must follow), longest phrase first.
    openers: Mapping[str, tuple[tuple[tuple[str, ...], bool, Opener], ...]] = field(init=False)
    interrogatives: frozenset[str] = field(init=False)  # the one-word wh-openers

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        dangling = self.conjunctions | self.prepositions | self.determiners | self.fillers
        set_(self, "dangling", dangling)
        leads = [" ".join(p) for p in self.leads] + sorted(self.fillers)
        lead = "|".join(re.escape(p) for p in sorted(leads, key=len, reverse=True))
        body = "|".join(p.replace("ß", "ss") for p in self.prefaces) or "(?!)"
        set_(self, "preface", re.compile(rf"^(?:(?:{lead}) )*(?:{body})$"))
        table = [(p, True, o) for p, o in self.wh.items()]
        table += [(p, False, o) for p, o in self.inversions.items()]
        by_first: dict[str, list[tuple[tuple[str, ...], bool, Opener]]] = {}
        for row in sorted(table, key=lambda row: -len(row[0])):
            by_first.setdefault(row[0][0], []).append(row)
        set_(self, "openers", MappingProxyType({k: tuple(v) for k, v in by_first.items()}))
        set_(self, "interrogatives", frozenset(p[0] for p in self.wh if len(p) == 1))
        set_(self, "wh", MappingProxyType(dict(self.wh)))
        set_(self, "inversions", MappingProxyType(dict(self.inversions)))


def openers(names: Iterable[str], opener: Opener) -> dict[tuple[str, ...], Opener]:
    """The same :class:`Opener` for each of ``names`` (folded phrases)."""
    return {p: opener for p in phrases(*names)}


_warned: set[str] = set()


def cue_words(language: str | None) -> CueWords | None:
    """The cue words of ``language`` (a code or alias); None, logged once per code, for a
    language without them."""
    code = canonical(language)
    if code is None:
        key = str(language)
        if key not in _warned:
            _warned.add(key)
            logger.info("no turn cues for language {!r}: punctuation alone is read", key)
        return None
    return _load(code)


def _load(code: str) -> CueWords:
    module = import_module(f"{__name__}.{code}")
    return module.WORDS


def backchannels(language: str | None) -> tuple[str, ...]:
    """The language's backchannels (English for a language without cue words)."""
    return _load(canonical(language) or "en").backchannels
