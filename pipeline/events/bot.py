"""What the bot does: its audio playing out, pausing and being interrupted, its replies
started early or merged, and the LLM's streamed text, reasoning and markers and the TTS
around them."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.events.event import Event
from pipeline.messages import Usage


@dataclass(frozen=True, slots=True)
class BotStartedSpeaking(Event):
    """Bot audio began to play out (not: began to be generated)."""

    t: float


@dataclass(frozen=True, slots=True)
class BotStoppedSpeaking(Event):
    t: float


@dataclass(frozen=True, slots=True)
class PreemptiveReplyEnded(Event):
    """A reply started before the user's turn ended was ``used`` (released when the turn
    ended) or ``wasted`` (dropped unseen: the user went on, or the context changed)."""

    used: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class UserTurnMerged(Event):
    """The user went on right after a turn had been ended and answered: that turn and
    the start of its answer were taken back, and its words begin the turn in progress."""

    user_text: str
    assistant_text: str


@dataclass(frozen=True, slots=True)
class BotPaused(Event):
    """The bot's audio went silent at the user's voice, the rest of the reply kept."""

    t: float


@dataclass(frozen=True, slots=True)
class BotResumed(Event):
    """The paused reply goes on from where it stopped (``interrupted`` False), or was
    cancelled (``interrupted`` True: an :class:`Interruption` follows). ``unconfirmed``:
    the pause came at the VAD's onset of what then proved no speech."""

    t: float
    interrupted: bool = False
    unconfirmed: bool = False


@dataclass(frozen=True, slots=True)
class Interruption(Event):
    """The user barged in: the bot turn is being cancelled."""

    t: float


@dataclass(frozen=True, slots=True)
class LLMResponseStarted(Event):
    """An LLM response (one bot turn's text) begins."""


@dataclass(frozen=True, slots=True)
class LLMText(Event):
    """A chunk of streamed LLM text (not yet spoken)."""

    text: str


@dataclass(frozen=True, slots=True)
class LLMMarker(Event):
    """The LLM began its answer with a turn-completion marker (✓ ○ ◐): it goes in the
    context (the LLM reads its own verdicts back), never to TTS or the transcript."""

    marker: str


@dataclass(frozen=True, slots=True)
class LLMResponseEnded(Event):
    """The LLM stream ended: what it used, and why it stopped (the provider's
    ``finish_reason``: "stop", "length", "tool_calls"…, or "error" if it failed)."""

    usage: Usage | None = None
    stop_reason: str | None = None


@dataclass(frozen=True, slots=True)
class BotText(Event):
    """Text the user actually received: spoken (its audio played) or, for a text-only
    response, sent. This, not :class:`LLMText`, is what the assistant message holds."""

    text: str
    spoken: bool = True
    includes_spaces: bool = False  # True for raw LLM tokens, which carry their own spacing


@dataclass(frozen=True, slots=True)
class BotTextStarted(Event):
    """A spoken segment (a sentence) began to play out: captions can show it now."""

    text: str


@dataclass(frozen=True, slots=True)
class BotTextProgress(Event):
    """Playout of the segment :class:`BotTextStarted` announced reached another word:
    ``spoken`` is the segment's ``text`` up to and including that word (where the TTS
    gives no word times, placed by the share of the segment's characters before it)."""

    text: str
    spoken: str


@dataclass(frozen=True, slots=True)
class TTSStarted(Event):
    """The bot turn began synthesizing speech."""


@dataclass(frozen=True, slots=True)
class TTSStopped(Event):
    """The bot turn finished (or stopped) synthesizing speech."""


@dataclass(frozen=True, slots=True)
class LLMThoughtStarted(Event):
    llm: str = ""
    append_to_context: bool = False


@dataclass(frozen=True, slots=True)
class LLMThoughtText(Event):
    text: str


@dataclass(frozen=True, slots=True)
class LLMThoughtEnded(Event):
    signature: str = ""
