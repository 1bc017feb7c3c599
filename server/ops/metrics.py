"""Parley's Prometheus metrics: one registry per app, what feeds it, and ``GET /metrics``.

Served by prometheus_client. Sessions are watched through the session registry (opened,
closed) and their conversation's events (:mod:`server.ops.session_observer`); HTTP
answers by a middleware (:mod:`server.ops.http_metrics`); the event loop by
:class:`server.process.loop_lag.LoopLagMonitor`; state and process figures are read at scrape
time (:mod:`server.ops.live_gauges`, :mod:`server.process.proc`). One :class:`ServerMetrics`
per app (``app.state.metrics``), on its own registry rather than the library's global one:
a process (a test run) may build many apps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import prometheus_client
from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    generate_latest,
)

from pipeline.hearing.turn_scorer import Score, TurnScorer
from server import __version__
from server.guards import auth
from server.ops.http_metrics import HTTPMetrics
from server.ops.live_gauges import LiveGauges
from server.ops.metric_families import (
    LAG_BUCKETS,
    ServiceFamilies,
    SessionFamilies,
    TurnFamilies,
    TurnTimingFamilies,
)
from server.ops.session_observer import SessionObserver
from server.process.loop_lag import LoopLagMonitor
from server.process.proc import ProcReader
from server.session.registry import SessionRegistry
from server.session.session import Session

# The text format 0.0.4 has no place for a counter's creation time: each would show up as
# one more gauge family (``parley_sessions_created_created``). Process-wide, as the
# library keeps this setting.
prometheus_client.disable_created_metrics()

# What ``generate_latest`` writes (names and labels escaped to the classic character set).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


class ServerMetrics:
    """The metric families of one app, and the observers that feed them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        Info("parley", "Build information.", registry=r).info({"version": __version__})
        self.sessions = SessionFamilies(r)
        self.turns = TurnFamilies(r)
        self.timing = TurnTimingFamilies(r)
        self.services = ServiceFamilies(r)
        self.http_responses = Counter(
            "parley_http_responses_total", "HTTP answers by status class.", ["code"], registry=r
        )
        self.loop_lag = Histogram(
            "parley_event_loop_lag_seconds",
            "How late the event loop woke a timer (sampled every 0.25 s).",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.lag_monitor = LoopLagMonitor(self.loop_lag.observe)
        self.audio_packets_dropped = Counter(
            "parley_audio_packets_dropped_total",
            "Inbound audio packets dropped over a session's rate (PARLEY_AUDIO_PACKET_RATE).",
            registry=r,
        )
        self.audio_packets_lost = Counter(
            "parley_audio_packets_lost_total",
            "Inbound WebRTC audio packets that never arrived (counted as each call ends).",
            registry=r,
        )
        self.audio_packets_late = Counter(
            "parley_audio_packets_late_total",
            "Inbound WebRTC audio packets that arrived behind the sequence and were dropped "
            "(counted as each call ends).",
            registry=r,
        )
        process = ProcReader(registry=r)  # process_cpu_seconds_total, process_open_fds, ...
        self.live = LiveGauges(self.lag_monitor, process)
        r.register(self.live)

    def attach(
        self,
        sessions: SessionRegistry,
        models_ready: Callable[[], bool],
        turn_scorer: TurnScorer | None = None,
    ) -> None:
        """Watch ``sessions`` and the end-of-turn model (the app's lifespan calls this as
        it starts)."""
        sessions.listeners.append(self)
        self.live.attach(sessions, models_ready)
        if turn_scorer is not None:
            turn_scorer.on_score.append(self._turn_scored)

    def _turn_scored(self, score: Score) -> None:
        self.timing.turn_model.labels("queue").observe(score.queued)
        self.timing.turn_model.labels("inference").observe(score.inference)

    def session_opened(self, session: Session) -> None:
        self.sessions.created.inc()
        session.audio_gate.on_drop = self.audio_packets_dropped.inc
        SessionObserver(self.turns, self.timing, self.services, session)

    def session_closed(self, session: Session) -> None:
        self.sessions.closed.labels(session.close_reason or "unknown").inc()
        self.sessions.duration.observe(max(0.0, time.time() - session.created_at))
        info = session.transport.info()
        self.audio_packets_lost.inc(info.get("audio_packets_lost", 0))
        self.audio_packets_late.inc(info.get("audio_packets_late", 0))

    def render(self) -> bytes:
        """Every family in the text exposition format 0.0.4."""
        return generate_latest(self.registry)


router = APIRouter(tags=["status"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format"}},
)
async def metrics(request: Request) -> Response:
    """Prometheus metrics, text exposition format 0.0.4."""
    server_metrics: ServerMetrics = request.app.state.metrics
    return Response(server_metrics.render(), media_type=CONTENT_TYPE)


def add_metrics(app: Any, metrics: ServerMetrics) -> None:
    """Install the HTTP middleware and the ``/metrics`` route on ``app``."""
    app.state.metrics = metrics
    app.add_middleware(
        HTTPMetrics, responses=metrics.http_responses, errors=metrics.services.errors
    )
    app.include_router(router, dependencies=auth.PROTECTED)  # /health and /ready stay open
