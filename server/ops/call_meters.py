"""A few OpenTelemetry metrics of the calls, exported over OTLP beside their traces.

The Prometheus families (:mod:`server.ops.metric_families`) stay the full set; these are
what a backend that only takes OTLP needs most: calls, turns and the voice-to-voice
latency. They go with the traces (:mod:`server.ops.tracing` builds them when it is on,
and an endpoint for metrics is set) unless ``OTEL_METRICS_EXPORTER=none``; the SDK's
reader exports them from its own thread every ``OTEL_METRIC_EXPORT_INTERVAL`` ms (60 s by
default) and once more at shutdown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from server import __version__
from server.ops.metric_families import LATENCY_BUCKETS

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
    from opentelemetry.sdk.resources import Resource


class CallMeters:
    """The instruments the trace observers record into."""

    def __init__(self, provider: MeterProvider) -> None:
        meter = provider.get_meter("parley", __version__)
        self.calls = meter.create_counter(
            "parley.calls", unit="{call}", description="Calls started, by transport."
        )
        self.turns = meter.create_counter(
            "parley.turns", unit="{turn}", description="Turns taken, by side (user, bot)."
        )
        self.voice_to_voice = meter.create_histogram(
            "parley.voice_to_voice",
            unit="s",
            description="From the end of the user's speech to the bot's first audio out.",
            explicit_bucket_boundaries_advisory=list(LATENCY_BUCKETS),
        )


def metrics_wanted(environ: Mapping[str, str]) -> bool:
    """With traces on: when an endpoint for metrics is set (the common one, or
    ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``) and not ``OTEL_METRICS_EXPORTER=none``."""
    if environ.get("OTEL_METRICS_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def start_meters(resource: Resource) -> SDKMeterProvider:
    """The SDK's meter provider, exporting over OTLP/HTTP (the endpoint from the
    ``OTEL_*`` variables, ``/v1/metrics`` after the base one)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    return SDKMeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
