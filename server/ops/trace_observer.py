"""One call's conversation events as OpenTelemetry spans.

A ``call`` span for the whole call; under it a ``user_turn`` span per turn of the user's
(children: ``end_of_turn``, the wait from the end of speech to the decision, and ``stt``)
and a ``bot_turn`` span per answer (children: ``llm``, ``tts`` and a ``tool_call`` per
call the LLM asked for). Spans are made from the events the pipeline already emits, as
:mod:`server.ops.session_observer` counts them: the pipeline knows nothing of tracing.

Spans are started and ended with explicit times and parents, never through the current
context: events arrive from many tasks, and one call's spans must not become another's
children. What was said (a personal datum) goes in attributes only with
``PARLEY_TRACE_TEXT=true``; lengths and counts always do.
"""

from __future__ import annotations

import json
import time

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from pipeline.events import (
    AssistantTranscript,
    BotResponseEnded,
    BotStartedSpeaking,
    FunctionCallCancelled,
    FunctionCallResult,
    FunctionCallsStarted,
    Interruption,
    LLMResponseEnded,
    LLMResponseStarted,
    Metric,
    PreemptiveReplyEnded,
    ServiceError,
    SpeechStopped,
    Transcription,
    TTSStarted,
    TTSStopped,
    TurnEndScore,
    UserTranscript,
    UserTurnDiscarded,
    UserTurnStarted,
    UserTurnStopped,
)
from server.ops.call_meters import CallMeters
from server.session.session import Session


class SessionClock:
    """The session's clock (``time.monotonic()`` seconds, as events carry it) as the
    nanoseconds since the epoch that spans take."""

    # An event time further than this from now is not on the monotonic clock.
    PLAUSIBLE_SECONDS = 600.0

    def now(self) -> int:
        return time.time_ns()

    def at(self, t: float) -> int:
        ago = time.monotonic() - t
        if not 0.0 <= ago <= self.PLAUSIBLE_SECONDS:
            return time.time_ns()
        return time.time_ns() - int(ago * 1e9)


# The longest text an attribute carries (PARLEY_TRACE_TEXT): a span stays a bounded size.
TEXT_LIMIT = 4096


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 1)


def as_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def said(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 1] + "…"


class TraceObserver:
    """Turns one session's events into spans under its ``call`` span."""

    def __init__(
        self, tracer: Tracer, session: Session, trace_text: bool, meters: CallMeters | None = None
    ) -> None:
        self.tracer = tracer
        self.text = trace_text
        self.meters = meters
        self.clock = SessionClock()
        self.call = tracer.start_span(
            "call",
            kind=SpanKind.SERVER,
            attributes={
                "parley.session.id": session.pc_id,
                "parley.transport": session.transport.kind,
            },
        )
        self._user_turn: Span | None = None
        self._user_turn_end: int | None = None  # the turn stopped; its transcript follows
        self._last_user_turn: Span | None = None
        self._bot_turn: Span | None = None
        self._bot_turn_end: int | None = None  # delivered; its transcript follows
        self._llm: Span | None = None
        self._tts: Span | None = None
        self._tools: dict[str, Span] = {}
        self._speech_end: float | None = None
        self._turn_end_score: TurnEndScore | None = None
        self._awaiting_answer_since: float | None = None
        self._heard: Transcription | None = None
        self._tts_characters = 0
        self._tts_measured = False
        self._counts = {"user_turns": 0, "bot_turns": 0, "interruptions": 0}
        self._subscribe(session)
        if meters is not None:
            meters.calls.add(1, {"transport": session.transport.kind})

    def _subscribe(self, session: Session) -> None:
        on = session.voice.conversation.events.on
        on(SpeechStopped, self._speech_stopped)
        on(TurnEndScore, self._turn_end_scored)
        on(UserTurnStarted, self._user_turn_started)
        on(UserTurnStopped, self._user_turn_stopped)
        on(UserTurnDiscarded, self._user_turn_discarded)
        on(UserTranscript, self._user_transcript)
        on(Transcription, self._transcription)
        on(LLMResponseStarted, self._response_started)
        on(LLMResponseEnded, self._llm_ended)
        on(TTSStarted, self._tts_started)
        on(TTSStopped, self._tts_stopped)
        on(BotStartedSpeaking, self._bot_started_speaking)
        on(FunctionCallsStarted, self._calls_started)
        on(FunctionCallResult, self._call_result)
        on(FunctionCallCancelled, self._call_cancelled)
        on(Interruption, self._interrupted)
        on(BotResponseEnded, self._response_delivered)
        on(PreemptiveReplyEnded, self._preemptive)
        on(AssistantTranscript, self._assistant_transcript)
        on(Metric, self._metric)
        on(ServiceError, self._service_error)

    def _count(self, what: str) -> None:
        self._counts[what] += 1
        if self.meters is not None and what != "interruptions":
            self.meters.turns.add(1, {"side": what.removesuffix("_turns")})

    def _child(self, name: str, parent: Span | None, start: int | None = None) -> Span:
        context = trace.set_span_in_context(parent or self.call)
        return self.tracer.start_span(name, context=context, start_time=start or self.clock.now())

    # -- the user's turns ----------------------------------------------------------------

    def _speech_stopped(self, event: SpeechStopped) -> None:
        self._speech_end = event.t

    def _turn_end_scored(self, event: TurnEndScore) -> None:
        self._turn_end_score = event

    def _user_turn_started(self, event: UserTurnStarted) -> None:
        self._finish_user_turn()
        self._count("user_turns")
        self._awaiting_answer_since = None
        self._speech_end = None
        self._turn_end_score = None
        span = self._child("user_turn", None, self.clock.at(event.t))
        span.set_attribute("parley.turn.start_strategy", event.strategy)
        self._user_turn = self._last_user_turn = span

    def _user_turn_stopped(self, event: UserTurnStopped) -> None:
        turn = self._user_turn
        if turn is None:
            return
        stopped = self.clock.at(event.t)
        speech_end = self._speech_end if self._speech_end is not None else event.t
        decision = self._child("end_of_turn", turn, self.clock.at(speech_end))
        decision.set_attribute("parley.turn.stop_strategy", event.strategy)
        decision.set_attribute("parley.turn.wait_ms", ms(max(0.0, event.t - speech_end)))
        score = self._turn_end_score
        if score is not None and score.speech_end == self._speech_end:
            decision.set_attribute("parley.turn.end_probability", round(score.probability, 3))
        decision.end(end_time=max(stopped, self.clock.at(speech_end)))
        turn.set_attribute("parley.turn.stop_strategy", event.strategy)
        self._awaiting_answer_since = speech_end
        self._user_turn_end = stopped  # ended when its transcript comes (just after)

    def _user_turn_discarded(self, event: UserTurnDiscarded) -> None:
        if self._user_turn is not None:
            self._user_turn.set_attribute("parley.turn.discarded", True)
            self._user_turn_end = self.clock.at(event.t)
            self._finish_user_turn()

    def _user_transcript(self, event: UserTranscript) -> None:
        turn = self._user_turn
        if turn is None:  # typed text (send-text): a turn with no speech
            self._count("user_turns")
            turn = self._user_turn = self._last_user_turn = self._child("user_turn", None)
            turn.set_attribute("parley.turn.typed", True)
            self._user_turn_end = self.clock.now()
        turn.set_attribute("parley.user.characters", len(event.content))
        if self.text:
            turn.set_attribute("parley.user.text", said(event.content))
        if self._user_turn_end is not None:
            self._finish_user_turn()

    def _finish_user_turn(self) -> None:
        if self._user_turn is not None:
            self._user_turn.end(end_time=self._user_turn_end or self.clock.now())
        self._user_turn = None
        self._user_turn_end = None

    def _transcription(self, event: Transcription) -> None:
        self._heard = event  # its STT span is made at the measurement that follows

    def _stt_measured(self, processing: float) -> None:
        """The STT's span, from its measured processing time back from now."""
        end = self.clock.now()
        span = self._child(
            "stt", self._user_turn or self._last_user_turn, end - int(processing * 1e9)
        )
        span.set_attribute("parley.processing_ms", ms(processing))
        heard, self._heard = self._heard, None
        if heard is not None:
            span.set_attribute("parley.stt.final", heard.final)
            span.set_attribute("parley.stt.characters", len(heard.text))
            if heard.language:
                span.set_attribute("parley.stt.language", heard.language)
            if self.text:
                span.set_attribute("parley.stt.text", said(heard.text))
        span.end(end_time=end)

    # -- the bot's turns ------------------------------------------------------------------

    def _response_started(self, event: LLMResponseStarted) -> None:
        self._finish_bot_turn()
        self._count("bot_turns")
        self._bot_turn = self._child("bot_turn", None)
        self._llm = self._child("llm", self._bot_turn)

    def _llm_ended(self, event: LLMResponseEnded) -> None:
        llm, self._llm = self._llm, None
        if llm is None:
            return
        if event.usage is not None:
            llm.set_attributes(
                {
                    "gen_ai.usage.input_tokens": event.usage.input_tokens,
                    "gen_ai.usage.output_tokens": event.usage.output_tokens,
                }
            )
        if event.stop_reason:
            llm.set_attribute("gen_ai.response.finish_reasons", (event.stop_reason,))
        llm.end()

    def _tts_started(self, event: TTSStarted) -> None:
        self._tts = self._child("tts", self._bot_turn)
        self._tts_characters = 0
        self._tts_measured = False

    def _tts_stopped(self, event: TTSStopped) -> None:
        if self._tts is not None:
            self._tts.end()
        self._tts = None

    def _bot_started_speaking(self, event: BotStartedSpeaking) -> None:
        turn = self._bot_turn
        if turn is None:
            return
        turn.add_event("bot_started_speaking", timestamp=self.clock.at(event.t))
        if self._awaiting_answer_since is not None:
            latency = max(0.0, event.t - self._awaiting_answer_since)
            turn.set_attribute("parley.voice_to_voice_ms", ms(latency))
            if self.meters is not None:
                self.meters.voice_to_voice.record(latency)
            self._awaiting_answer_since = None

    def _interrupted(self, event: Interruption) -> None:
        self._count("interruptions")
        if self._bot_turn is not None:
            self._bot_turn.set_attribute("parley.interrupted", True)
            self._bot_turn_end = self.clock.at(event.t)

    def _preemptive(self, event: PreemptiveReplyEnded) -> None:
        # A reply computed before the turn ended, released now: its events were held, so
        # its llm span is as long as the release took; parley.ttfb_ms is still the LLM's.
        if event.used and self._bot_turn is not None:
            self._bot_turn.set_attribute("parley.preemptive", True)

    def _response_delivered(self, event: BotResponseEnded) -> None:
        self._bot_turn_end = self.clock.now()  # ended when its transcript comes (just after)

    def _assistant_transcript(self, event: AssistantTranscript) -> None:
        turn = self._bot_turn
        if turn is None:
            return
        turn.set_attribute("parley.bot.characters", len(event.content))
        if event.interrupted:
            turn.set_attribute("parley.interrupted", True)
        if self.text:
            turn.set_attribute("parley.bot.text", said(event.content))
        self._finish_bot_turn()

    def _finish_bot_turn(self) -> None:
        for span in (self._llm, self._tts):
            if span is not None:  # cancelled before it could end (an interruption)
                span.set_attribute("parley.cancelled", True)
                span.end()
        self._llm = self._tts = None
        if self._bot_turn is not None:
            self._bot_turn.end(end_time=self._bot_turn_end or self.clock.now())
        self._bot_turn = None
        self._bot_turn_end = None

    # -- tools ---------------------------------------------------------------------------

    def _calls_started(self, event: FunctionCallsStarted) -> None:
        for call in event.calls:
            span = self._child("tool_call", self._bot_turn)
            span.set_attributes(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": call.function_name,
                    "gen_ai.tool.call.id": call.tool_call_id,
                }
            )
            if call.group_id:
                span.set_attribute("parley.tool.group", call.group_id)
            if self.text:
                span.set_attribute("gen_ai.tool.call.arguments", said(as_json(call.arguments)))
            self._tools[call.tool_call_id] = span

    def _call_result(self, event: FunctionCallResult) -> None:
        span = self._tools.get(event.tool_call_id)
        if span is None:
            return
        if not event.is_final:
            span.add_event("intermediate_result")
            return
        del self._tools[event.tool_call_id]
        if self.text:
            span.set_attribute("gen_ai.tool.call.result", said(as_json(event.result)))
        span.end()

    def _call_cancelled(self, event: FunctionCallCancelled) -> None:
        span = self._tools.pop(event.tool_call_id, None)
        if span is not None:
            span.set_attribute("parley.cancelled", True)
            span.end()

    # -- measurements and failures ------------------------------------------------------

    def _metric(self, event: Metric) -> None:
        if event.service == "stt":
            if event.kind == "processing":
                self._stt_measured(float(event.value))
            return
        span = self._llm if event.service == "llm" else self._tts
        if span is None:
            return
        if event.model:
            span.set_attribute("gen_ai.request.model", event.model)
        if event.kind == "ttfb" and not (span is self._tts and self._tts_measured):
            # The TTS measures each sentence: its span keeps the first, what was waited for.
            span.set_attribute("parley.ttfb_ms", ms(float(event.value)))
            self._tts_measured = span is self._tts
        elif event.kind == "characters":
            self._tts_characters += int(event.value)
            span.set_attribute("parley.tts.characters", self._tts_characters)

    def _service_error(self, event: ServiceError) -> None:
        span = {"llm": self._llm, "tts": self._tts}.get(event.service) or self._bot_turn
        target = span or self.call
        target.set_status(Status(StatusCode.ERROR, f"{event.service} failed"))
        target.add_event(
            "service_error", {"parley.service": event.service, "parley.fatal": event.fatal}
        )

    # -- the end ---------------------------------------------------------------------------

    def close(self, reason: str) -> None:
        """The call ended: every span still open ends with it."""
        self._finish_user_turn()
        self._finish_bot_turn()
        for span in self._tools.values():
            span.set_attribute("parley.cancelled", True)
            span.end()
        self._tools.clear()
        self.call.set_attribute("parley.close_reason", reason)
        self.call.set_attributes({f"parley.{name}": n for name, n in self._counts.items()})
        self.call.end()
