"""One session's conversation events, counted into the server's metric families."""

from __future__ import annotations

from pipeline.events import (
    AssistantTranscript,
    BotPaused,
    BotResumed,
    BotStartedSpeaking,
    Interruption,
    Metric,
    PreemptiveReplyEnded,
    ServiceError,
    SpeechStopped,
    UserSpeechDiscarded,
    UserTranscript,
    UserTurnMerged,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.messages import Usage
from server.ops.metric_families import ServiceFamilies, TurnFamilies, TurnTimingFamilies
from server.rtvi.protocol import RTVIError
from server.session.session import Session


class SessionObserver:
    """Feeds one session's conversation events into the turn and service families."""

    def __init__(
        self,
        turns: TurnFamilies,
        timing: TurnTimingFamilies,
        services: ServiceFamilies,
        session: Session,
    ) -> None:
        self.turns = turns
        self.timing = timing
        self.services = services
        self._speech_end: float | None = None
        self._awaiting_answer_since: float | None = None
        self._paused_at: float | None = None
        events = session.voice.conversation.events
        events.on(SpeechStopped, self._speech_stopped)
        events.on(UserTurnStarted, self._user_turn_started)
        events.on(UserTurnStopped, self._user_turn_stopped)
        events.on(BotStartedSpeaking, self._bot_started_speaking)
        events.on(UserTranscript, self._user_transcript)
        events.on(AssistantTranscript, self._assistant_transcript)
        events.on(Interruption, lambda _: turns.interruptions.inc())
        events.on(ServiceError, lambda e: services.errors.labels(e.service).inc())
        events.on(Metric, self._metric)
        events.on(PreemptiveReplyEnded, self._preemptive)
        events.on(BotPaused, self._paused)
        events.on(BotResumed, self._resumed)
        events.on(UserTurnMerged, lambda _: turns.merged.inc())
        events.on(UserSpeechDiscarded, lambda e: turns.discarded.labels(e.reason).inc())
        session.rtvi.error_listeners.append(self._rtvi_error)
        session.faults.listeners.append(lambda _where: services.errors.labels("handler").inc())

    def _speech_stopped(self, event: SpeechStopped) -> None:
        self._speech_end = event.t

    def _user_turn_started(self, event: UserTurnStarted) -> None:
        self._awaiting_answer_since = None

    def _user_turn_stopped(self, event: UserTurnStopped) -> None:
        # Voice-to-voice counts from the end of the speech, not from the turn's end
        # (which comes a silence window later), as a person hears it.
        self._awaiting_answer_since = self._speech_end if self._speech_end is not None else event.t
        if self._speech_end is not None:
            self.timing.turn_end_wait.observe(max(0.0, event.t - self._speech_end))

    def _paused(self, event: BotPaused) -> None:
        self._paused_at = event.t

    def _resumed(self, event: BotResumed) -> None:
        outcome = "unconfirmed" if event.unconfirmed else "resumed"
        self.turns.pauses.labels("interrupted" if event.interrupted else outcome).inc()
        if not event.interrupted and self._paused_at is not None:
            self.timing.pause_seconds.observe(max(0.0, event.t - self._paused_at))
        self._paused_at = None

    def _preemptive(self, event: PreemptiveReplyEnded) -> None:
        self.turns.preemptive.labels("used" if event.used else "wasted").inc()

    def _bot_started_speaking(self, event: BotStartedSpeaking) -> None:
        if self._awaiting_answer_since is not None:
            self.timing.voice_to_voice.observe(max(0.0, event.t - self._awaiting_answer_since))
            self._awaiting_answer_since = None

    def _user_transcript(self, event: UserTranscript) -> None:
        if event.content:
            self.turns.user_turns.inc()

    def _assistant_transcript(self, event: AssistantTranscript) -> None:
        outcome = "interrupted" if event.interrupted else "completed"
        self.turns.bot_turns.labels(outcome).inc()

    def _metric(self, event: Metric) -> None:
        s = self.services
        if event.kind == "ttfb":
            s.ttfb.labels(event.service).observe(float(event.value))
        elif event.kind == "processing":
            s.processing.labels(event.service).observe(float(event.value))
        elif event.kind == "tokens" and isinstance(event.value, Usage):
            s.tokens.labels("input").inc(event.value.input_tokens)
            s.tokens.labels("output").inc(event.value.output_tokens)
        elif event.kind == "characters":
            s.tts_characters.inc(int(event.value))
        elif event.kind == "reasoning_tokens":
            s.reasoning_tokens.inc(int(event.value))
        elif event.kind == "thought_characters":
            s.thought_characters.inc(int(event.value))

    def _rtvi_error(self, error: RTVIError) -> None:
        self.services.errors.labels("rtvi").inc()
