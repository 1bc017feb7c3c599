"""Gauges read when ``/metrics`` is scraped: sessions and peer connections open, models
ready, draining, the event loop's recent lag, threads and asyncio tasks.

A custom collector rather than ``Gauge.set_function``: some figures have labels (peer
connections by state), and some do not exist yet (the session registry before the app's
lifespan starts, asyncio tasks outside the loop): their families are then left out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import NamedTuple

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from server.process.loop_lag import LoopLagMonitor
from server.process.proc import ProcReader
from server.session.registry import SessionRegistry


class _Gauge(NamedTuple):
    name: str
    help: str
    read: Callable[[], float | None]  # None: leave the family out of this scrape


class LiveGauges:
    """The scrape-time gauges of one app (registered on its registry)."""

    def __init__(self, lag: LoopLagMonitor, reader: ProcReader) -> None:
        self._sessions: SessionRegistry | None = None
        self._models_ready: Callable[[], bool] = lambda: False
        self._gauges = (
            _Gauge("parley_sessions_active", "Sessions open now.", self._active),
            _Gauge("parley_models_ready", "1 when the models in use are loaded.", self._ready),
            _Gauge("parley_draining", "1 while the server shuts down.", self._draining),
            _Gauge(
                "parley_event_loop_lag_max_seconds",
                "The largest event-loop lag of the last 10 s.",
                lambda: lag.recent_max,
            ),
            _Gauge(
                "parley_threads",
                "OS threads of the process (model pools included).",
                lambda: _number(reader.threads()),
            ),
            _Gauge("parley_asyncio_tasks", "asyncio tasks alive on the event loop.", _tasks),
        )

    def attach(self, sessions: SessionRegistry, models_ready: Callable[[], bool]) -> None:
        self._sessions = sessions
        self._models_ready = models_ready

    def describe(self) -> Iterator[Metric]:
        """The families this collector yields (so the registry refuses a second one)."""
        for gauge in self._gauges:
            yield GaugeMetricFamily(gauge.name, gauge.help)
        yield GaugeMetricFamily("parley_peer_connections", "", labels=["state"])

    def collect(self) -> Iterator[Metric]:
        for gauge in self._gauges:
            value = gauge.read()
            if value is not None:
                yield GaugeMetricFamily(gauge.name, gauge.help, value=value)
        if self._sessions is not None:
            yield self._peer_connections(self._sessions)

    def _active(self) -> float | None:
        return None if self._sessions is None else len(self._sessions)

    def _ready(self) -> float | None:
        return None if self._sessions is None else float(self._models_ready())

    def _draining(self) -> float | None:
        return None if self._sessions is None else float(self._sessions.draining)

    @staticmethod
    def _peer_connections(sessions: SessionRegistry) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "parley_peer_connections", "Peer connections by connection state.", labels=["state"]
        )
        counts: dict[str, int] = {}
        for session in list(sessions.sessions.values()):
            state = session.transport.connection_state
            counts[state] = counts.get(state, 0) + 1
        for state, count in sorted(counts.items()):
            family.add_metric([state], count)
        return family


def _number(value: int | None) -> float | None:
    return None if value is None else float(value)


def _tasks() -> float | None:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # no running loop (a scrape from another thread)
        return None
