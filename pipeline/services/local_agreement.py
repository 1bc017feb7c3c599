"""LocalAgreement-2: the words of a growing utterance that two passes in a row agree on.

Whisper re-reads the whole utterance at each interim pass, and its last words change as
more audio arrives (a word cut in half, "four" becoming "fourteen"). Words that two
consecutive passes over ever longer audio both put at the start of their text are
committed (Macháček et al., "Turning Whisper into Real-Time Transcription System",
2023): they are forced as the decoder's prefix of later passes, so each pass and the
final one generate only the rest. Words are compared without case or punctuation
("late." and "late," agree); the committed text keeps the newer pass's spelling. The
older pass's last word is never committed: its audio may have ended inside it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.services.whisper_decoding import word_key


def agreed_words(previous: Sequence[str], current: Sequence[str]) -> int:
    """How many leading words ``previous`` and ``current`` share (by :func:`word_key`)."""
    count = 0
    for old, new in zip(previous, current, strict=False):
        if word_key(old) != word_key(new) or not word_key(new):
            break
        count += 1
    return count


class LocalAgreement:
    """The committed words of one utterance, updated pass by pass. Committed words are
    never taken back: a later pass that disagrees with them only commits nothing."""

    def __init__(self) -> None:
        self.committed: list[str] = []
        self._previous: list[str] | None = None

    def update(self, hypothesis: str) -> list[str]:
        """Take one pass's text; returns the words it newly committed."""
        words = hypothesis.split()
        newly: list[str] = []
        if self._previous is not None:
            count = min(agreed_words(self._previous, words), len(self._previous) - 1)
            if count > len(self.committed) and agreed_words(self.committed, words) == len(
                self.committed
            ):
                newly = words[len(self.committed) : count]
                self.committed = self.committed + newly
        self._previous = words
        return newly

    @property
    def text(self) -> str:
        """The committed words as text."""
        return " ".join(self.committed)

    @property
    def prefix(self) -> str:
        """The committed words as the decoder's prefix: the last one without its
        closing punctuation, so the model still chooses between "late." and "late,"."""
        if not self.committed:
            return ""
        last = self.committed[-1].rstrip(".,?!;:")
        return " ".join([*self.committed[:-1], last] if last else self.committed[:-1])
