"""Sentence aggregation between the LLM and TTS.

LLM text streams in token by token; TTS wants whole sentences (prosody) but as early as
possible (latency). The first piece of each answer may be a clause, cut at a comma,
semicolon or colon once it has a few words, so the bot starts speaking sooner; after
that, whole sentences. A period is not a boundary in "3.5", "e.g.", "Dr.", initials,
URLs or e-mail addresses, nor when the next word starts in lower case.
"""

from __future__ import annotations

import re

ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e eg ie a.m p.m u.s u.k inc ltd co mt no "
    "approx dept est fig jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
_SENTENCE_END = frozenset(".!?…")
_CLAUSE_END = frozenset(",;:")
# Words a clause must have before it may go to TTS on its own.
MIN_CLAUSE_WORDS = 4
# A possible boundary: a mark followed by whitespace (and then, to decide, more text).
_CANDIDATE = re.compile(r"[.!?…,;:](?=\s)")
_NON_SPACE = re.compile(r"\S")


def _word_before(text: str, i: int) -> str:
    """The run of non-space characters that ends just before ``text[i]``."""
    j = i
    while j > 0 and not text[j - 1].isspace():
        j -= 1
    return text[j:i]


def _ends_sentence(text: str, i: int, nxt: str) -> bool:
    """Whether the punctuation at ``text[i]``, followed by space and then ``nxt``, ends one."""
    mark = text[i]
    if mark in "!?…":
        return True
    word = _word_before(text, i).lower().lstrip("([\"'")
    if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return False  # "Dr. Smith", "J. R. R. Tolkien"
    return not (nxt.islower() or nxt.isdigit())


class SentenceAggregator:
    """Collects streamed text and hands out whole sentences (or a first clause).

    Each push scans only the text not yet decided: a mark is decided for good once a
    non-space character follows its space, so the scan resumes at the first mark still
    waiting for one (or at the last character, a mark whose next character has not come).
    Long unpunctuated answers cost time in proportion to their length, not its square.
    ``scanned`` counts the characters searched (some twice), for tests of that.
    """

    # Set by reset().
    _buffer: str
    _resume: int
    _seen: int
    _first: bool

    def __init__(self, min_clause_words: int = MIN_CLAUSE_WORDS) -> None:
        self._min_clause_words = min_clause_words
        self.scanned = 0
        self.reset()

    def push(self, text: str) -> list[str]:
        """Add streamed text; return the sentences that are now complete."""
        # Taken off self first: with the only reference local, CPython appends in place
        # instead of copying the whole pending answer on every token.
        buf, self._buffer = self._buffer, ""
        buf += text
        out: list[str] = []
        start = 0
        resume = max(len(buf) - 1, 0)  # where the next push scans from
        # The text from _seen on is new; before it, after a waiting mark, only spaces.
        seen = self._seen
        searched_to = len(buf)  # how far the search for marks went
        for match in _CANDIDATE.finditer(buf, self._resume):
            i = match.start()
            after = _NON_SPACE.search(buf, max(i + 2, seen))
            self.scanned += (after.end() if after else len(buf)) - max(i + 2, seen)
            if after is None:
                resume = i  # nothing after the space yet: decide when more text comes
                searched_to = i + 1
                break
            is_end = buf[i] in _SENTENCE_END and _ends_sentence(buf, i, after.group())
            if not is_end and self._first and buf[i] in _CLAUSE_END:
                is_end = len(buf[start : i + 1].split()) >= self._min_clause_words
            if is_end:
                piece = buf[start : i + 1].strip()
                if piece:
                    out.append(piece)
                    self._first = False
                start = i + 1
        self.scanned += searched_to - self._resume
        self._buffer = buf[start:]
        self._resume = max(resume - start, 0)
        self._seen = len(buf) - start
        return out

    def flush(self) -> str:
        """End of the answer: whatever is left, as the last sentence ('' if none)."""
        rest = self._buffer.strip()
        self.reset()
        return rest

    def reset(self) -> None:
        self._buffer = ""
        self._resume = 0  # in the buffer: the first character not yet decided
        self._seen = 0  # in the buffer: the end of the text the last push saw
        self._first = True
