"""Speech over the bot: a real interruption, or a backchannel to talk through?

When the VAD confirms the user's voice while the bot's audio plays, the conversation
pauses the bot at once (silence from the next frame, the unplayed audio kept, the reply
still generating) and asks :class:`InterruptionDecider` what it was:

- **interrupt**: the user says more than a backchannel, asks a question, or keeps
  talking past ``max_backchannel_seconds``; the reply is cancelled as in any barge-in.
- **resume**: a backchannel ("mhm", "yeah", "okay", "I see"…), an utterance with no
  words (a cough, a noise), the bot's own recent words coming back (echo), or no words
  at all within ``false_interruption_timeout`` of the speech's end; the reply goes on
  from the sample where it paused, as if nothing happened.

The decider is a clock-free state machine like the turn strategies: events in through
:meth:`InterruptionDecider.handle`, time through :meth:`InterruptionDecider.advance`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

from pipeline.events import Event, SpeechStarted, SpeechStopped, Transcription
from pipeline.turns.languages import fold
from pipeline.turns.languages.en import DEFAULT_BACKCHANNELS  # re-exported


class Verdict(Enum):
    INTERRUPT = "interrupt"
    RESUME = "resume"


@dataclass(frozen=True, slots=True)
class InterruptionParams:
    """How speech over the bot is judged (see the module docstring)."""

    backchannels: tuple[str, ...] = DEFAULT_BACKCHANNELS
    max_backchannel_seconds: float = 1.0
    false_interruption_timeout: float = 1.0
    echo_overlap: float = 0.6  # share of the words the bot has just said: its own echo
    _phrases: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_backchannel_seconds <= 0 or self.false_interruption_timeout <= 0:
            raise ValueError("max_backchannel_seconds and false_interruption_timeout must be > 0")
        if not 0 < self.echo_overlap <= 1:
            raise ValueError("echo_overlap must be in (0, 1]")
        object.__setattr__(self, "_phrases", frozenset(normalise(b) for b in self.backchannels))

    def is_backchannel(self, text: str) -> bool:
        """All of ``text`` is backchannel phrases (and it is no question)."""
        if text.strip().endswith("?"):
            return False
        words = normalise(text).split()
        if not words:
            return False
        # Greedy from the left, longest phrase first (at most three words).
        i = 0
        while i < len(words):
            for size in (3, 2, 1):
                if " ".join(words[i : i + size]) in self._phrases:
                    i += size
                    break
            else:
                return False
        return True


# Letters of any script (and digits, apostrophes): "sí", "d'accord", "ähm" stay whole.
_NON_WORD = re.compile(r"[^\w' ]+|_")


def normalise(text: str) -> str:
    """Lower case, hyphens as spaces, no punctuation: "Uh-huh." → "uh huh", "¿Sí?" →
    "sí" (folded as the turn cues fold words: NFC, U+2019 as "'", "ß" as "ss")."""
    folded = fold(text).replace("-", " ")
    return " ".join(_NON_WORD.sub(" ", folded).split())


def is_echo(text: str, bot_words: str, overlap: float) -> bool:
    """``text`` (two words or more) is mostly words the bot has just said."""
    heard = normalise(text).split()
    if len(heard) < 2:
        return False
    said = set(normalise(bot_words).split())
    return sum(w in said for w in heard) >= overlap * len(heard)


class InterruptionDecider:
    """Judges one stretch of speech over the bot, from :meth:`start` to a verdict."""

    def __init__(self, params: InterruptionParams | None = None) -> None:
        self.params = params or InterruptionParams()
        self.pending = False
        self._onset = 0.0
        self._speaking = False
        self._awaiting = 0  # utterances whose transcript has not come in
        self._words: list[str] = []
        self._due: float | None = None  # no words by then: resume
        self.bot_words = ""  # what the bot said lately (for the echo check)
        # Why the last verdict was to resume: "backchannel", "echo" or "no_words" (none
        # heard, or none in time); see pipeline/hearing/discards.py.
        self.reason: str | None = None

    def start(self, onset: float) -> None:
        """The bot was paused: speech began at ``onset`` and goes on."""
        self.pending, self._onset, self._speaking = True, onset, True
        self._awaiting, self._words, self._due = 0, [], None
        self.reason = None

    @property
    def deadline(self) -> float | None:
        if not self.pending:
            return None
        if self._speaking:
            return self._onset + self.params.max_backchannel_seconds
        return self._due

    @property
    def heard(self) -> str:
        return " ".join(self._words)

    def handle(self, event: Event) -> Verdict | None:
        """A VAD event or a transcript while pending; the verdict, once there is one."""
        if not self.pending:
            return None
        if isinstance(event, SpeechStarted):
            self._speaking, self._due = True, None
        elif isinstance(event, SpeechStopped):
            self._speaking = False
            self._awaiting += 1
            self._due = event.t + self.params.false_interruption_timeout
        elif isinstance(event, Transcription) and event.final:
            self._awaiting = max(0, self._awaiting - 1)
            if event.text.strip():
                self._words.append(event.text.strip())
            if self._awaiting == 0 and not self._speaking:
                return self._done(self._judge())
        return None

    def advance(self, now: float) -> Verdict | None:
        """Time passes: speech too long for a backchannel, or no words in time."""
        due = self.deadline
        if due is None or now < due:
            return None
        if self._speaking:
            return self._done(Verdict.INTERRUPT)
        self.reason = "no_words"
        return self._done(Verdict.RESUME)

    def _judge(self) -> Verdict:
        text = self.heard
        if not text:
            self.reason = "no_words"
        elif self.params.is_backchannel(text):
            self.reason = "backchannel"
        elif is_echo(text, self.bot_words, self.params.echo_overlap):
            self.reason = "echo"
        else:
            return Verdict.INTERRUPT
        return Verdict.RESUME

    def _done(self, verdict: Verdict) -> Verdict:
        self.pending = False
        return verdict
