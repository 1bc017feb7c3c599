"""The few event types that move through a session, and the emitter that delivers them.

Every event is a small frozen dataclass. Times (``t``) are seconds on the session's
clock (``time.monotonic()`` in production, any scripted number in tests). Events are
facts that already happened; they are delivered synchronously, in order, to whoever
subscribed (see :class:`Emitter`). Audio does not travel as events: 20 ms frames are
handed straight from the transport to the VAD, and bot audio straight to the outbound
track, so nothing queues behind a control event.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pipeline.messages import Usage

# -- user speech (VAD) -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every event."""


@dataclass(frozen=True, slots=True)
class SpeechStarted(Event):
    """The VAD heard the user start speaking; ``t`` is the speech onset."""

    t: float


@dataclass(frozen=True, slots=True)
class SpeechOnset(Event):
    """The VAD hears what may be the start of speech (not yet confirmed: ``SpeechStarted``
    follows ``start_secs`` later, or ``SpeechFalseStart`` if it was not speech)."""

    t: float


@dataclass(frozen=True, slots=True)
class SpeechFalseStart(Event):
    """What the VAD heard at the last ``SpeechOnset`` did not become speech."""

    t: float


@dataclass(frozen=True, slots=True)
class SpeechStopped(Event):
    """The VAD decided the user stopped; ``t`` is when the speech ended (not when the
    silence window closed, which is ``t + stop_secs``)."""

    t: float


@dataclass(frozen=True, slots=True)
class AudioIdle(Event):
    """Audio stopped arriving while the user was speaking (e.g. mic muted mid-speech)."""

    t: float


# -- transcription -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transcription(Event):
    """Text heard from the user. ``final`` transcripts go into the context."""

    text: str
    t: float
    final: bool = True
    user_id: str = ""


@dataclass(frozen=True, slots=True)
class TurnEndScore(Event):
    """The end-of-turn model's probability that the user's turn is complete, scored on
    the turn's audio up to the pause whose speech ended at ``speech_end`` (the
    ``SpeechStopped.t`` it answers); ``t`` is when the score arrived."""

    t: float
    probability: float
    speech_end: float


# -- user turns (from the turn controller) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class UserTurnStarted(Event):
    """A user turn began. ``interrupt`` asks the session to cancel the bot turn."""

    t: float
    strategy: str
    interrupt: bool = False


@dataclass(frozen=True, slots=True)
class UserTurnStopped(Event):
    """The user's turn is over: time to answer."""

    t: float
    strategy: str


@dataclass(frozen=True, slots=True)
class UserTurnEndPredicted(Event):
    """The user's turn will probably end soon (a stop strategy's forecast): an answer may
    be prepared now and held until the turn really stops."""

    t: float
    strategy: str


@dataclass(frozen=True, slots=True)
class UserTurnDiscarded(Event):
    """The user's turn is over and was no turn at all (a backchannel, a cough, the bot's
    own echo): nothing of it goes into the context and nothing answers it."""

    t: float
    text: str = ""


@dataclass(frozen=True, slots=True)
class UserTurnStopTimeout(Event):
    """No stop strategy fired within ``user_turn_stop_timeout``; the turn was ended."""

    t: float


@dataclass(frozen=True, slots=True)
class UserIdle(Event):
    """The user has said nothing for ``user_idle_timeout`` seconds."""

    t: float


@dataclass(frozen=True, slots=True)
class UserMuteStarted(Event):
    t: float


@dataclass(frozen=True, slots=True)
class UserMuteStopped(Event):
    t: float


# -- the bot ----------------------------------------------------------------------------


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
    cancelled (``interrupted`` True: an :class:`Interruption` follows)."""

    t: float
    interrupted: bool = False


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


# -- function calls -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """One tool call requested by the LLM."""

    tool_call_id: str
    function_name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    cancel_on_interruption: bool = True
    group_id: str | None = None


@dataclass(frozen=True, slots=True)
class FunctionCallsStarted(Event):
    """The LLM asked for these calls (a parallel group)."""

    calls: tuple[FunctionCall, ...]


@dataclass(frozen=True, slots=True)
class FunctionCallInProgress(Event):
    call: FunctionCall


@dataclass(frozen=True, slots=True)
class FunctionCallResult(Event):
    """A result for a call; ``is_final=False`` is an intermediate result (async tools).
    ``run_llm`` overrides whether the LLM runs again once this result is in."""

    tool_call_id: str
    function_name: str
    result: Any
    is_final: bool = True
    run_llm: bool | None = None


@dataclass(frozen=True, slots=True)
class FunctionCallCancelled(Event):
    tool_call_id: str
    function_name: str


@dataclass(frozen=True, slots=True)
class AppMessage(Event):
    """A message for the client from the app or a tool (RTVI sends it as ``server-message``)."""

    data: Any


# -- what the aggregators report ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BotResponseEnded(Event):
    """Everything one LLM response produced has been delivered (its audio played out)."""


@dataclass(frozen=True, slots=True)
class UserTranscript(Event):
    """A user turn's text, as added to the context (``on_user_turn_stopped``)."""

    content: str
    timestamp: str
    user_id: str = ""


@dataclass(frozen=True, slots=True)
class AssistantTurnStarted(Event):
    timestamp: str


@dataclass(frozen=True, slots=True)
class AssistantTranscript(Event):
    """An assistant turn's text as delivered (``on_assistant_turn_stopped``); empty when
    it was interrupted before anything was said."""

    content: str
    interrupted: bool
    timestamp: str


@dataclass(frozen=True, slots=True)
class AssistantThought(Event):
    content: str
    timestamp: str


@dataclass(frozen=True, slots=True)
class LLMRunRequested(Event):
    """The context changed in a way that needs an answer: run the LLM on it."""

    reason: str


@dataclass(frozen=True, slots=True)
class ServiceError(Event):
    """A model service failed during a turn; the turn ended, the session goes on."""

    service: str
    error: str
    fatal: bool = False


@dataclass(frozen=True, slots=True)
class SummaryRequested(Event):
    """Older history should be summarized: ``request`` says what and how (a
    :class:`pipeline.summarizer.SummaryRequest`)."""

    request: Any


@dataclass(frozen=True, slots=True)
class SummaryAppliedEvent(Event):
    """A summary replaced older history (``on_summary_applied``); ``applied`` is a
    :class:`pipeline.summarizer.SummaryApplied`."""

    applied: Any


@dataclass(frozen=True, slots=True)
class Metric(Event):
    """One measurement: ``kind`` is "ttfb" or "processing" (seconds), "tokens" (a
    :class:`pipeline.messages.Usage`) or "characters" (TTS input length)."""

    service: str  # "stt", "llm", "tts"
    kind: str
    value: Any
    model: str = ""


# -- emitter ------------------------------------------------------------------------------------

E = TypeVar("E", bound=Event)


class Emitter:
    """Synchronous publish/subscribe by event type.

    Handlers run in subscription order, inside ``emit``; they must be quick and must not
    block (start a task for anything slow). An event emitted by a handler is delivered
    after the current one has reached all its handlers, so order is preserved.

    With ``on_error`` set, a handler that raises costs only its own call: ``on_error``
    hears of it and the event still reaches the handlers after it. A session sets it
    (``emit`` runs inside aiortc's callbacks, where an exception ends the call); without
    it the exception propagates, so that a unit test sees it.
    """

    def __init__(self) -> None:
        self._handlers: dict[type[Event], list[Callable[[Any], None]]] = defaultdict(list)
        self._pending: list[Event] = []
        self._delivering = False
        self.on_error: Callable[[Exception, Event], None] | None = None

    def on(self, event_type: type[E], handler: Callable[[E], None]) -> None:
        """Call ``handler`` for every event of exactly ``event_type``."""
        self._handlers[event_type].append(handler)

    def emit(self, event: Event) -> None:
        self._pending.append(event)
        if self._delivering:
            return
        self._delivering = True
        try:
            while self._pending:
                current = self._pending.pop(0)
                for handler in self._handlers.get(type(current), ()):
                    try:
                        handler(current)
                    except Exception as exc:
                        if self.on_error is None:
                            raise
                        self.on_error(exc, current)
        finally:
            self._delivering = False
            self._pending.clear()
