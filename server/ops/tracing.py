"""OpenTelemetry for the calls: on only when the standard ``OTEL_*`` variables ask for it.

With ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set, and
neither ``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none``, the app gets a
:class:`Tracing`: the official SDK's tracer provider, its batch processor (export runs in
the SDK's own thread, never on the event loop) and the OTLP exporter over HTTP/protobuf;
it listens to the session registry and puts a :class:`~server.ops.trace_observer.TraceObserver`
on each call, and a few metrics go with the traces (:mod:`server.ops.call_meters`). The
exporters read the rest of the ``OTEL_*`` variables themselves (headers, timeout,
compression, ``OTEL_BSP_*``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``).

Without them nothing is built: the SDK is not even imported and no call has an observer,
so a server that does not trace pays nothing for it. The provider is the app's own, not
the library's global one (as the Prometheus registry is the app's own): a process may
build many apps.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from loguru import logger

from server import __version__
from server.ops.call_meters import CallMeters, metrics_wanted, start_meters

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    from server.ops.trace_observer import TraceObserver
    from server.session.session import Session

DEFAULT_SERVICE_NAME = "parley"
# How long the last export may hold the server's exit.
SHUTDOWN_SECONDS = 5.0


def traces_wanted(environ: Mapping[str, str]) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces exported over OTLP."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if exporter == "none":
        return False
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint:
        return False
    if exporter != "otlp":
        logger.warning("OTEL_TRACES_EXPORTER={}: only otlp is supported, using it", exporter)
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol != "http/protobuf":
        logger.warning("OTEL_EXPORTER_OTLP_PROTOCOL={}: exporting over http/protobuf", protocol)
    return True


class Tracing:
    """The app's tracer provider and the observers of its calls (a session listener)."""

    def __init__(
        self, provider: TracerProvider, trace_text: bool, meters: MeterProvider | None = None
    ) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("parley", __version__)
        self.trace_text = trace_text
        self.meter_provider = meters
        self.meters = CallMeters(meters) if meters is not None else None
        self._observers: dict[int, TraceObserver] = {}

    def session_opened(self, session: Session) -> None:
        from server.ops.trace_observer import TraceObserver

        try:
            observer = TraceObserver(self.tracer, session, self.trace_text, self.meters)
        except Exception:  # tracing never costs a call
            logger.exception("session {}: no trace for this call", session.pc_id)
            return
        self._observers[id(session)] = observer  # the object: a restart may reuse the pc_id

    def session_closed(self, session: Session) -> None:
        observer = self._observers.pop(id(session), None)
        if observer is None:
            return
        try:
            observer.close(session.close_reason or "unknown")
        except Exception:
            logger.exception("session {}: its trace did not end", session.pc_id)

    def shutdown(self, within: float = SHUTDOWN_SECONDS) -> None:
        """Export what is left and stop the SDK's threads, for ``within`` seconds at most:
        a collector that is down must not hold the server's exit (blocks: run it off the
        loop)."""
        last = threading.Thread(target=self._shutdown, name="otel-shutdown", daemon=True)
        last.start()
        last.join(within)
        if last.is_alive():
            logger.warning("OpenTelemetry: the last spans were not exported within {} s", within)

    def _shutdown(self) -> None:
        self.provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def start_tracing(trace_text: bool, environ: Mapping[str, str] | None = None) -> Tracing | None:
    """A :class:`Tracing` exporting over OTLP/HTTP, or None when the environment does not
    ask for traces (then nothing of the SDK is imported)."""
    environ = os.environ if environ is None else environ
    if not traces_wanted(environ):
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win; "parley" only replaces the
    # SDK's own "unknown_service" default.
    resource = Resource.create({SERVICE_VERSION: __version__})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    # Shut down by the app's lifespan, within a bound; not again at exit (no atexit hook).
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    meters = start_meters(resource) if metrics_wanted(environ) else None
    logger.info(
        "OpenTelemetry traces{} on, service {} (transcript text in spans: {})",
        " and metrics" if meters is not None else "",
        resource.attributes.get(SERVICE_NAME),
        "yes" if trace_text else "no",
    )
    return Tracing(provider, trace_text, meters)
