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
_WORD_BEFORE = re.compile(r"(\S+)$")


def _ends_sentence(text: str, i: int) -> bool:
    """Whether the punctuation at ``text[i]`` (followed by space and more text) ends one."""
    mark = text[i]
    if mark in "!?…":
        return True
    match = _WORD_BEFORE.search(text, 0, i)
    word = match.group(1).lower().lstrip("([\"'") if match else ""
    if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return False  # "Dr. Smith", "J. R. R. Tolkien"
    nxt = text[i + 1 :].lstrip()[:1]
    return not (nxt.islower() or nxt.isdigit())


class SentenceAggregator:
    """Collects streamed text and hands out whole sentences (or a first clause)."""

    def __init__(self, min_clause_words: int = MIN_CLAUSE_WORDS) -> None:
        self._buffer = ""
        self._min_clause_words = min_clause_words
        self._first = True

    def push(self, text: str) -> list[str]:
        """Add streamed text; return the sentences that are now complete."""
        self._buffer += text
        out: list[str] = []
        start = 0
        buf = self._buffer
        # A boundary is punctuation followed by whitespace and then at least one more
        # character, which tells lower-case continuations ("e.g. the") apart.
        for i in range(len(buf) - 2):
            ch = buf[i]
            if i < start or not buf[i + 1].isspace():
                continue
            if not buf[i + 1 :].strip():
                break  # nothing after the space yet: decide when more text comes
            is_end = ch in _SENTENCE_END and _ends_sentence(buf, i)
            if not is_end and self._first and ch in _CLAUSE_END:
                is_end = len(buf[start : i + 1].split()) >= self._min_clause_words
            if is_end:
                piece = buf[start : i + 1].strip()
                if piece:
                    out.append(piece)
                    self._first = False
                start = i + 1
        self._buffer = buf[start:]
        return out

    def flush(self) -> str:
        """End of the answer: whatever is left, as the last sentence ('' if none)."""
        rest, self._buffer = self._buffer.strip(), ""
        self._first = True
        return rest

    def reset(self) -> None:
        self._buffer = ""
        self._first = True
