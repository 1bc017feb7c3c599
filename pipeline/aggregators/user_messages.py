"""The user aggregator: final transcripts within a user turn become one user message."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.aggregators.text_parts import join_text
from pipeline.context.llm_context import LLMContext
from pipeline.events import (
    Event,
    LLMRunRequested,
    Transcription,
    UserTranscript,
    UserTurnDiscarded,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.events.event import now_iso
from pipeline.messages import Message


class UserAggregator:
    """Collects final transcriptions; when the user turn stops, adds the user message,
    reports it (:class:`UserTranscript`, the ``on_user_turn_stopped`` payload) and asks
    for an answer (:class:`LLMRunRequested`).

    Only final text goes into the context; the latest interim transcription (the early
    words of a pause, see :mod:`pipeline.hearing.transcriber`) is kept only for
    :meth:`pending_message`, what a reply foreseen at that pause is made on. A turn
    that ends with no text still reports an empty :class:`UserTranscript` but adds
    nothing and asks for no answer.
    """

    def __init__(
        self,
        context: LLMContext,
        emit: Callable[[Event], None],
        clock: Callable[[], str] = now_iso,
    ) -> None:
        self.context = context
        self._emit = emit
        self._clock = clock
        self._parts: list[tuple[str, bool]] = []
        self._started_at = ""
        self._user_id = ""
        self._interim = ""  # the latest interim text since the last final one
        self.last_message: Message | None = None  # the latest user message it added
        self.last_started_at = ""  # when the turn of that message began

    def pending_message(self) -> dict[str, str] | None:
        """The message the turn would add if it ended now (None: no words yet), the
        latest interim words taken as final."""
        parts = [*self._parts, (self._interim, False)] if self._interim else self._parts
        content = join_text(parts)
        return {"role": "user", "content": content} if content else None

    def resume(self, text: str, started_at: str) -> None:
        """Take ``text`` back as the start of the turn in progress (a turn that ended too
        early, merged with what the user said next)."""
        self._parts.insert(0, (text, False))
        self._started_at = started_at

    def handle(self, event: Event) -> None:
        if isinstance(event, Transcription):
            if not event.final:
                self._interim = event.text.strip()
            elif event.text.strip():
                self._parts.append((event.text.strip(), False))
                self._user_id = event.user_id or self._user_id
            if event.final:
                self._interim = ""
        elif isinstance(event, UserTurnStarted):
            self._started_at = self._clock()
        elif isinstance(event, UserTurnStopped):
            self._finish_turn()
        elif isinstance(event, UserTurnDiscarded):
            self._parts.clear()
            self._interim = ""
            self._started_at = ""

    def add_text(self, text: str, run_llm: bool = True) -> Message:
        """Text typed by the user (RTVI ``send-text``): a whole user turn at once (gathered
        by :class:`pipeline.turns.merge.TypedTurns`). Returns the message it added; the
        :class:`UserTranscript` it reports is what holds the context to its budget."""
        message = self.last_message = self.context.add_message({"role": "user", "content": text})
        self._emit(UserTranscript(text, self._clock(), self._user_id))
        if run_llm:
            self._emit(LLMRunRequested("user text"))
        return message

    def close(self) -> None:
        """Session end: keep any text still being aggregated (nothing is lost)."""
        if self._parts:
            self._finish_turn(run_llm=False)

    def _finish_turn(self, run_llm: bool = True) -> None:
        content = join_text(self._parts)
        self._parts.clear()
        self._interim = ""
        timestamp = self._started_at or self._clock()
        self._started_at = ""
        self.last_started_at = timestamp
        if content:
            self.last_message = self.context.add_message({"role": "user", "content": content})
        self._emit(UserTranscript(content, timestamp, self._user_id))
        if content and run_llm:
            self._emit(LLMRunRequested("user turn"))
