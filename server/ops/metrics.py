"""Parley's Prometheus metrics: what is counted, where it comes from, and ``GET /metrics``.

Sessions are watched through the registry (opened, closed) and their conversation's
events (turns, interruptions, service errors, TTFB, voice-to-voice); HTTP answers by a
middleware; the event loop by :class:`server.ops.loop_lag.LoopLagMonitor`; the process
figures are read at scrape time. One :class:`ServerMetrics` per app (``app.state.metrics``).
"""

from __future__ import annotations

import asyncio
import os
import resource
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeline.frames import (
    AssistantTranscript,
    BotPaused,
    BotResumed,
    BotStartedSpeaking,
    Interruption,
    Metric,
    PreemptiveReplyEnded,
    ServiceError,
    SpeechStopped,
    UserTranscript,
    UserTurnMerged,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.messages import Usage
from pipeline.turn_scorer import Score, TurnScorer
from server import __version__
from server.api import auth
from server.ops.loop_lag import LoopLagMonitor
from server.ops.process_stats import process_start_time
from server.ops.prometheus import CONTENT_TYPE, Registry
from server.rtvi.protocol import RTVIError
from server.session.registry import SessionRegistry
from server.session.session import Session

# Voice-to-voice and TTFB: a fast answer is ~0.3 s, a slow one several seconds.
LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class ServerMetrics:
    """The metric families of one app, and the observers that feed them."""

    def __init__(self) -> None:
        self.registry = Registry()
        r = self.registry
        r.gauge("parley_info", "Build information.", ["version"], lambda: {(__version__,): 1})
        self.sessions_created = r.counter(
            "parley_sessions_created_total", "Sessions (peer connections) created."
        )
        self.sessions_closed = r.counter(
            "parley_sessions_closed_total", "Sessions closed, by reason.", ["reason"]
        )
        self.session_duration = r.histogram(
            "parley_session_duration_seconds", "How long sessions lasted.", (), DURATION_BUCKETS
        )
        self.user_turns = r.counter(
            "parley_user_turns_total", "User turns that reached the context (spoken or typed)."
        )
        self.bot_turns = r.counter(
            "parley_bot_turns_total", "Bot turns, completed or interrupted.", ["outcome"]
        )
        self.interruptions = r.counter(
            "parley_interruptions_total", "Barge-ins: the user interrupted the bot."
        )
        self.errors = r.counter(
            "parley_errors_total",
            "Errors by kind: stt, llm, tts (a failed model call), rtvi (a bad client "
            "message), handler (a session's handler raised; the call went on), http_5xx.",
            ["kind"],
        )
        self.voice_to_voice = r.histogram(
            "parley_voice_to_voice_seconds",
            "From the end of the user's speech to the bot's first audio out.",
            (),
            LATENCY_BUCKETS,
        )
        self.ttfb = r.histogram(
            "parley_service_ttfb_seconds",
            "Time to first byte of a model call.",
            ["service"],
            LATENCY_BUCKETS,
        )
        self.processing = r.histogram(
            "parley_service_processing_seconds",
            "Whole processing time of a model call.",
            ["service"],
            LATENCY_BUCKETS,
        )
        self.turn_end_wait = r.histogram(
            "parley_user_turn_end_wait_seconds",
            "From the end of the user's speech to the end of their turn (the VAD's stop "
            "window included).",
            (),
            LATENCY_BUCKETS,
        )
        self.turn_model = r.histogram(
            "parley_turn_model_seconds",
            "The end-of-turn model: time in its queue, and inference (features included).",
            ["stage"],
            LAG_BUCKETS,
        )
        self.preemptive = r.counter(
            "parley_preemptive_replies_total",
            "Replies started before the user's turn ended: used (played when it ended) or "
            "wasted (dropped unseen).",
            ["outcome"],
        )
        self.pauses = r.counter(
            "parley_bot_pauses_total",
            "The bot paused at the user's voice: resumed (a backchannel, a cough, its own "
            "echo) or interrupted.",
            ["outcome"],
        )
        self.pause_seconds = r.histogram(
            "parley_bot_pause_seconds",
            "How long the bot stayed silent before it resumed.",
            (),
            LATENCY_BUCKETS,
        )
        self.merged_turns = r.counter(
            "parley_user_turns_merged_total",
            "User turns taken back because the user went on right after them.",
        )
        self.tokens = r.counter("parley_llm_tokens_total", "LLM tokens used.", ["direction"])
        self.reasoning_tokens = r.counter(
            "parley_llm_reasoning_tokens_total",
            "LLM output tokens spent reasoning, as the endpoint reports them.",
        )
        self.thought_characters = r.counter(
            "parley_llm_thought_characters_total",
            "Characters of LLM reasoning streamed (never spoken).",
        )
        self.tts_characters = r.counter(
            "parley_tts_characters_total", "Characters sent to text-to-speech."
        )
        self.http_responses = r.counter(
            "parley_http_responses_total", "HTTP answers by status class.", ["code"]
        )
        self.loop_lag = r.histogram(
            "parley_event_loop_lag_seconds",
            "How late the event loop woke a timer (sampled every 0.25 s).",
            (),
            LAG_BUCKETS,
        )
        self.lag_monitor = LoopLagMonitor(self.loop_lag.observe)
        r.gauge(
            "parley_event_loop_lag_max_seconds",
            "The largest event-loop lag of the last 10 s.",
            function=lambda: self.lag_monitor.recent_max,
        )
        self._sessions: SessionRegistry | None = None
        self._models_ready: Callable[[], bool] = lambda: False
        self._state_gauges()
        _process_gauges(r)

    # -- wiring ----------------------------------------------------------------------------

    def attach(
        self,
        sessions: SessionRegistry,
        models_ready: Callable[[], bool],
        turn_scorer: TurnScorer | None = None,
    ) -> None:
        """Watch ``sessions`` and the end-of-turn model (the app's lifespan calls this as
        it starts)."""
        sessions.listeners.append(self)
        self._sessions = sessions
        self._models_ready = models_ready
        if turn_scorer is not None:
            turn_scorer.on_score.append(self._turn_scored)

    def _turn_scored(self, score: Score) -> None:
        self.turn_model.labels("queue").observe(score.queued)
        self.turn_model.labels("inference").observe(score.inference)

    def _state_gauges(self) -> None:
        r = self.registry

        def attached(read: Callable[[SessionRegistry], Any]) -> Callable[[], Any]:
            return lambda: None if self._sessions is None else read(self._sessions)

        r.gauge("parley_sessions_active", "Sessions open now.", function=attached(len))
        r.gauge(
            "parley_peer_connections",
            "Peer connections by connection state.",
            ["state"],
            attached(_count_states),
        )
        r.gauge(
            "parley_models_ready",
            "1 when the models in use are loaded.",
            function=attached(lambda _: float(self._models_ready())),
        )
        r.gauge(
            "parley_draining",
            "1 while the server shuts down.",
            function=attached(lambda sessions: float(sessions.draining)),
        )

    def session_opened(self, session: Session) -> None:
        self.sessions_created.inc()
        SessionObserver(self, session)

    def session_closed(self, session: Session) -> None:
        self.sessions_closed.labels(session.close_reason or "unknown").inc()
        self.session_duration.observe(max(0.0, time.time() - session.created_at))

    def render(self) -> str:
        return self.registry.render()


class SessionObserver:
    """Feeds one session's conversation events into the server's metrics."""

    def __init__(self, metrics: ServerMetrics, session: Session) -> None:
        self.metrics = metrics
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
        events.on(Interruption, lambda _: metrics.interruptions.inc())
        events.on(ServiceError, lambda e: metrics.errors.labels(e.service).inc())
        events.on(Metric, self._metric)
        events.on(PreemptiveReplyEnded, self._preemptive)
        events.on(BotPaused, self._paused)
        events.on(BotResumed, self._resumed)
        events.on(UserTurnMerged, lambda _: metrics.merged_turns.inc())
        session.rtvi.error_listeners.append(self._rtvi_error)
        session.faults.listeners.append(lambda _where: metrics.errors.labels("handler").inc())

    def _speech_stopped(self, event: SpeechStopped) -> None:
        self._speech_end = event.t

    def _user_turn_started(self, event: UserTurnStarted) -> None:
        self._awaiting_answer_since = None

    def _user_turn_stopped(self, event: UserTurnStopped) -> None:
        # Voice-to-voice counts from the end of the speech, not from the turn's end
        # (which comes a silence window later), as a person hears it.
        self._awaiting_answer_since = self._speech_end if self._speech_end is not None else event.t
        if self._speech_end is not None:
            self.metrics.turn_end_wait.observe(max(0.0, event.t - self._speech_end))

    def _paused(self, event: BotPaused) -> None:
        self._paused_at = event.t

    def _resumed(self, event: BotResumed) -> None:
        self.metrics.pauses.labels("interrupted" if event.interrupted else "resumed").inc()
        if not event.interrupted and self._paused_at is not None:
            self.metrics.pause_seconds.observe(max(0.0, event.t - self._paused_at))
        self._paused_at = None

    def _preemptive(self, event: PreemptiveReplyEnded) -> None:
        self.metrics.preemptive.labels("used" if event.used else "wasted").inc()

    def _bot_started_speaking(self, event: BotStartedSpeaking) -> None:
        if self._awaiting_answer_since is not None:
            self.metrics.voice_to_voice.observe(max(0.0, event.t - self._awaiting_answer_since))
            self._awaiting_answer_since = None

    def _user_transcript(self, event: UserTranscript) -> None:
        if event.content:
            self.metrics.user_turns.inc()

    def _assistant_transcript(self, event: AssistantTranscript) -> None:
        outcome = "interrupted" if event.interrupted else "completed"
        self.metrics.bot_turns.labels(outcome).inc()

    def _metric(self, event: Metric) -> None:
        m = self.metrics
        if event.kind == "ttfb":
            m.ttfb.labels(event.service).observe(float(event.value))
        elif event.kind == "processing":
            m.processing.labels(event.service).observe(float(event.value))
        elif event.kind == "tokens" and isinstance(event.value, Usage):
            m.tokens.labels("input").inc(event.value.input_tokens)
            m.tokens.labels("output").inc(event.value.output_tokens)
        elif event.kind == "characters":
            m.tts_characters.inc(int(event.value))
        elif event.kind == "reasoning_tokens":
            m.reasoning_tokens.inc(int(event.value))
        elif event.kind == "thought_characters":
            m.thought_characters.inc(int(event.value))

    def _rtvi_error(self, error: RTVIError) -> None:
        self.metrics.errors.labels("rtvi").inc()


class HTTPMetrics:
    """ASGI middleware: counts HTTP answers by status class (and 5xx as errors)."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def send_and_count(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_count)
        finally:
            self.metrics.http_responses.labels(f"{status // 100}xx").inc()
            if status >= 500:
                self.metrics.errors.labels("http_5xx").inc()


# -- process figures, read at scrape time ------------------------------------------------------


def _count_states(sessions: SessionRegistry) -> dict[tuple[str, ...], float]:
    counts: dict[tuple[str, ...], float] = {}
    for session in list(sessions.sessions.values()):
        key = (session.pc.connectionState,)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _rss_bytes() -> float:
    try:
        with open("/proc/self/statm") as statm:
            return float(int(statm.read().split()[1]) * _PAGE_SIZE)
    except OSError:
        # Peak rather than current, where /proc is missing (macOS reports bytes).
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def _open_fds() -> float | None:
    try:
        return float(len(os.listdir("/proc/self/fd")))
    except OSError:
        return None


def _threads() -> float:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Threads:"):
                    return float(line.split()[1])
    except OSError:
        pass
    return float(threading.active_count())


def _asyncio_tasks() -> float | None:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # no running loop (a scrape from another thread)
        return None


def _process_gauges(r: Registry) -> None:
    r.gauge("process_resident_memory_bytes", "Resident memory size in bytes.", function=_rss_bytes)
    r.gauge("process_open_fds", "Number of open file descriptors.", function=_open_fds)
    r.counter_function(
        "process_cpu_seconds_total",
        "User and system CPU time spent, in seconds.",
        function=lambda: sum(os.times()[:2]),
    )
    r.gauge(
        "process_start_time_seconds",
        "Start time, seconds since the epoch.",
        function=process_start_time,
    )
    r.gauge(
        "parley_threads", "OS threads of the process (model pools included).", function=_threads
    )
    r.gauge(
        "parley_asyncio_tasks", "asyncio tasks alive on the event loop.", function=_asyncio_tasks
    )


# -- the route ---------------------------------------------------------------------------------

router = APIRouter(tags=["status"])


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format"}},
)
async def metrics(request: Request) -> PlainTextResponse:
    """Prometheus metrics, text exposition format 0.0.4."""
    server_metrics: ServerMetrics = request.app.state.metrics
    return PlainTextResponse(server_metrics.render(), media_type=CONTENT_TYPE)


def add_metrics(app: Any, metrics: ServerMetrics) -> None:
    """Install the HTTP middleware and the ``/metrics`` route on ``app``."""
    app.state.metrics = metrics
    app.add_middleware(HTTPMetrics, metrics=metrics)
    app.include_router(router, dependencies=auth.PROTECTED)  # /health and /ready stay open
