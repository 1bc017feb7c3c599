"""Whether a transcript is a question by its form, not only by its "?".

Recognizers that return bare words ("can you tell me what the answer is", no mark) are
common (telephony, streaming), and a question's form says as much as its mark: an
interrogative opener ("where…", "¿cuándo…", "pourquoi…", "wie viel…"), a verb before
its subject ("can you…", "y a-t-il…", "kannst du…"), a tag after a statement ("…, right",
"¿verdad?", "n'est-ce pas", "gell"), an opening "¿", or, in French, an interrogative
left in place ("tu fais quoi").

The opener is looked for at the start of the last sentence and of the last clause, after
any lead-in ("so", "okay", "excuse me", fillers); what follows it must fit (a subject
after the verb, no relative pronoun after the wh-word: see each language's module). A
question whose body is still missing is not one yet: it ends on an auxiliary or a copula
with no embedded clause ("where is", "what time is", but "do you know where it is" is
fine), or on a subject right after an auxiliary ("can you", "wo kann ich"), or has too
few words after the verb ("is there", "gibt es").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipeline.turns.languages import CueWords, Opener, fold

# A word (letters and digits, inner apostrophes: "qu'est", "don't"), or a mark that
# matters: a sentence stop, a clause break, "¿" / "¡", a hyphen inside a word.
_TOKEN = re.compile(r"([^\W_]+(?:'[^\W_]+)*)|([.!?…])|([,;:])|([¿¡])|(-)")


@dataclass
class Words:
    """A transcript as words, with where its sentences and clauses start."""

    words: list[str] = field(default_factory=list)
    sentence: int = 0  # where the last sentence starts
    clause: int = 0  # where the last clause starts
    opened: bool = False  # the last sentence opens with "¿"
    breaks: set[int] = field(default_factory=set)  # words right after a clause break
    attached: set[int] = field(default_factory=set)  # words joined by a hyphen ("dis-le")


def split(text: str) -> Words:
    """``text`` folded into words (see :func:`pipeline.turns.languages.fold`)."""
    out = Words()
    hyphen_end = -1
    sentences: list[tuple[int, bool]] = [(0, False)]  # (first word, opened by "¿")
    for match in _TOKEN.finditer(fold(text)):
        word, stop, pause, opening, hyphen = match.groups()
        n = len(out.words)
        if word:
            if match.start() == hyphen_end:
                out.attached.add(n)
            out.words.append(word)
        elif hyphen:
            hyphen_end = match.end()
        elif stop or opening:
            sentences.append((n, opening == "¿"))
            out.breaks.add(n)
        elif pause:
            out.breaks.add(n)
    # The last sentence and clause that hold a word (a final "?" starts none).
    n = len(out.words)
    out.sentence, out.opened = max(s for s in sentences if s[0] < n or s[0] == 0)
    out.clause = max([out.sentence, *(b for b in out.breaks if b < n)])
    return out


@dataclass(frozen=True, slots=True)
class Form:
    """What the form says: ``question`` (a complete one), and ``wh``: it opens with an
    interrogative, so a stranded preposition at its end is not dangling."""

    question: bool = False
    wh: bool = False
    tag: bool = False


def question_form(split_words: Words, cues: CueWords) -> Form:
    """The question form of ``split_words`` in ``cues``' language."""
    words = split_words.words
    found = False
    for start in sorted({split_words.sentence, split_words.clause}, reverse=True):
        opening = _opening(_without_leads(words[start:], cues), cues)
        if opening is not None:
            wh, body = opening
            if body is not None:
                return Form(question=_complete(body, cues), wh=wh)
            found = True
    if found:  # an opener with the wrong words after it: "can't wait", "what a day"
        return Form()
    if split_words.opened and split_words.sentence < len(words):
        return Form(question=True)
    tag = _tagged(split_words, cues)
    if tag or _wh_in_place(words, cues):
        return Form(question=True, tag=tag)
    return Form()


def _without_leads(words: list[str], cues: CueWords) -> list[str]:
    """``words`` without lead-ins ("so", "okay", "excuse me") and fillers at the start."""
    changed = True
    while changed and words:
        changed = False
        if words[0] in cues.fillers:
            words, changed = words[1:], True
            continue
        for lead in cues.leads:
            if tuple(words[: len(lead)]) == lead and len(words) > len(lead):
                words, changed = words[len(lead) :], True
                break
    return words


def _opening(words: list[str], cues: CueWords) -> tuple[bool, list[str] | None] | None:
    """(is a wh-opener, the words if what follows fits the opener, else None); None when
    ``words`` start with no opener at all."""
    for phrase, wh, opener in cues.openers.get(words[0], ()) if words else ():
        if tuple(words[: len(phrase)]) == phrase:
            rest = [w for w in words[len(phrase) :] if w not in cues.skipped]
            return wh, words if _fits(rest, opener, cues) else None
    return None


def _fits(rest: list[str], opener: Opener, cues: CueWords) -> bool:
    if not rest:
        return False
    first = rest[0]
    if (opener.only is not None and first not in opener.only) or first in opener.never:
        return False
    body = [w for w in rest[1:] if w not in cues.softeners]
    if first in cues.subjects and not body:
        return False  # "what you", "wo ich", "qu'est-ce que vous": the verb is to come
    return len(body) >= opener.more


def _complete(words: list[str], cues: CueWords) -> bool:
    """Whether a question's words have their body: not "where is", "can you"."""
    last = words[-1]
    open_ended = cues.auxiliaries | cues.copulas
    if last in open_ended or last in cues.interrogatives:
        return any(w in cues.embedders for w in words[1:-1])
    return not (last in cues.subjects and len(words) > 1 and words[-2] in cues.auxiliaries)


def _tagged(split_words: Words, cues: CueWords) -> bool:
    """The turn ends in a tag after a statement of two words or more."""
    words = split_words.words
    for tag, not_after in cues.tags.items():
        n = len(tag)
        if len(words) < n + 2 or tuple(words[-n:]) != tag:
            continue
        marked = len(words) - n in split_words.breaks  # "…, right"
        if marked or words[-n - 1] not in not_after:
            return True
    return False


def _wh_in_place(words: list[str], cues: CueWords) -> bool:
    """An interrogative left at the end ("c'est quoi", "tu pars quand")."""
    if len(words) < 2 or words[-1] not in cues.wh_final:
        return False
    return words[-2] not in cues.wh_final_not_after
