"""What the aggregators and services report: a response delivered, transcripts as they
enter the context, a request to run the LLM, service errors, summaries and metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.events.event import Event


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
    :class:`pipeline.context.summarizer.SummaryRequest`)."""

    request: Any


@dataclass(frozen=True, slots=True)
class SummaryAppliedEvent(Event):
    """A summary replaced older history (``on_summary_applied``); ``applied`` is a
    :class:`pipeline.context.summarizer.SummaryApplied`."""

    applied: Any


@dataclass(frozen=True, slots=True)
class Metric(Event):
    """One measurement: ``kind`` is "ttfb" or "processing" (seconds), "tokens" (a
    :class:`pipeline.messages.Usage`) or "characters" (TTS input length)."""

    service: str  # "stt", "llm", "tts"
    kind: str
    value: Any
    model: str = ""
