"""The live TTS interface: one connection per call, one context per answer.

A WebSocket voice (Cartesia, ElevenLabs, Deepgram Aura) is fastest over a socket that is
already open, and sounds best when the sentences of one answer go to the same context:
the voice keeps its prosody across them. A :class:`LiveTTSService` opens one
:class:`TTSConnection` per call (the conversation opens it at the start and closes it at
the end); each bot turn takes a :class:`TTSContext` from it and speaks its sentences
there one by one (:meth:`TTSContext.say`), as a per-sentence TTS would, so the pacing,
the held replies and the barge-in work as they do with every other TTS.

Closing a sentence's stream before its end (a barge-in cancels the turn) cancels the
context at the vendor: nothing more is generated, played or billed. The words' times,
where the vendor gives them, are written into the sentence's :class:`SpokenText` as
they arrive; the outbound track reads them to report RTVI 2.1's spoken progress and to
cut the context at the word the caller last heard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from pipeline.services.closable import ClosableStream
from pipeline.services.tts import TTSService


@dataclass(frozen=True, slots=True)
class WordTime:
    """One spoken word: ``start``/``end`` in seconds from the sentence's first sample;
    ``until``: where the word ends in the sentence's text."""

    start: float
    end: float
    until: int


class SpokenText(str):
    """A sentence's text that also carries its words' times (``words``), filled in by
    the TTS while the sentence is synthesized; empty when the vendor gives none."""

    words: list[WordTime]

    def __new__(cls, text: str) -> SpokenText:
        spoken = super().__new__(cls, text)
        spoken.words = []
        return spoken

    def add_word(self, word: str, start: float, end: float) -> None:
        """The next word the voice spoke; found in the text after the last one (a word
        the vendor spelled otherwise is skipped: its time is not worth a wrong cut)."""
        after = self.words[-1].until if self.words else 0
        found = self.find(word.strip(), after) if word.strip() else -1
        if found < 0:
            return
        self.words.append(WordTime(start, max(start, end), found + len(word.strip())))


def heard_until(text: str, seconds: float, *, started: bool = False) -> int | None:
    """Where in ``text`` the caller's hearing ends after ``seconds`` of its audio: after
    the last word whose middle (``started``: whose start) has played; None when the
    text has no word times (the caller estimates)."""
    words = getattr(text, "words", None)
    if not words:
        return None
    until = 0
    for word in words:
        due = word.start if started else (word.start + word.end) / 2
        if due > seconds:
            break
        until = word.until
    return until


class TTSContext(Protocol):
    """One answer's speech on a call's connection."""

    def say(self, text: SpokenText) -> ClosableStream[np.ndarray]:
        """The next sentence of the answer, spoken as its continuation. Closing the
        stream early cancels the context at the vendor."""
        ...

    def close(self) -> None:
        """The answer is over (no more sentences); nothing to wait for."""
        ...

    def cancel(self) -> None:
        """The answer was cut (a barge-in): the vendor stops the context now."""
        ...


@runtime_checkable
class TTSConnection(Protocol):
    """One call's connection to the voice."""

    sample_rate: int
    model: str

    def context(self) -> TTSContext: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class LiveTTSService(TTSService, Protocol):
    """A TTS that opens one :class:`TTSConnection` per call; it still speaks a single
    text (:meth:`synthesize`, on a socket of its own) for callers that have only that."""

    def open_live(self) -> TTSConnection: ...
