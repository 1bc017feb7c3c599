"""An OTLP/HTTP receiver on 127.0.0.1: what a collector is to a traced server.

It takes ``POST /v1/traces`` and ``POST /v1/metrics`` as the OpenTelemetry collector does
(protobuf bodies, gzip or not), decodes them with the official ``opentelemetry-proto``
messages and keeps every span and metric point it was sent, flattened for tests to read.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from testkit.thread_server import serve_in_thread

PROTOBUF = "application/x-protobuf"


def value(any_value: AnyValue) -> Any:
    """An attribute's value as Python (arrays as tuples)."""
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return tuple(value(v) for v in any_value.array_value.values)
    if kind is None:
        return None
    return getattr(any_value, kind)


def attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as it arrived: ids in hex, times in ns since the epoch."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    start: int
    end: int
    attributes: dict[str, Any]
    events: tuple[str, ...]
    status_code: int
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""

    @property
    def seconds(self) -> float:
        return (self.end - self.start) / 1e9


@dataclass(frozen=True)
class ReceivedPoint:
    """One data point of a metric: a sum's value or a histogram's count and sum."""

    metric: str
    attributes: dict[str, Any]
    value: float
    count: int = 0
    resource: dict[str, Any] = field(default_factory=dict)


def _body(request_body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(request_body)
    if encoding == "deflate":
        return zlib.decompress(request_body)
    return request_body


class OTLPReceiver:
    """Keeps what was exported to it; ``url`` is its base (``OTEL_EXPORTER_OTLP_ENDPOINT``)."""

    def __init__(self) -> None:
        self.url = ""
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self._points: list[ReceivedPoint] = []
        self.requests = 0

    def spans(self, predicate: Callable[[ReceivedSpan], bool] | None = None) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self._spans if predicate is None or predicate(s)]

    def points(self, metric: str, **resource: str) -> list[ReceivedPoint]:
        """The points of ``metric`` from the resources with these attributes."""
        with self._lock:
            return [
                p
                for p in self._points
                if p.metric == metric and all(p.resource.get(k) == v for k, v in resource.items())
            ]

    def wait_for(self, predicate: Callable[[], bool], within: float = 10.0) -> bool:
        """Poll ``predicate`` (exports arrive from the server's exporter thread)."""
        deadline = time.monotonic() + within
        while not predicate():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    async def _traces(self, request: Request) -> Response:
        message = ExportTraceServiceRequest()
        encoding = request.headers.get("content-encoding", "")
        message.ParseFromString(_body(await request.body(), encoding))
        received = [
            ReceivedSpan(
                name=span.name,
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                parent_id=span.parent_span_id.hex(),
                kind=span.kind,
                start=span.start_time_unix_nano,
                end=span.end_time_unix_nano,
                attributes=attributes(span.attributes),
                events=tuple(e.name for e in span.events),
                status_code=span.status.code,
                resource=attributes(resource_spans.resource.attributes),
                scope=scope_spans.scope.name,
            )
            for resource_spans in message.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
        with self._lock:
            self._spans.extend(received)
            self.requests += 1
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type=PROTOBUF)

    async def _metrics(self, request: Request) -> Response:
        message = ExportMetricsServiceRequest()
        encoding = request.headers.get("content-encoding", "")
        message.ParseFromString(_body(await request.body(), encoding))
        received: list[ReceivedPoint] = []
        for resource_metrics in message.resource_metrics:
            resource = attributes(resource_metrics.resource.attributes)
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    received.extend(_points(metric, resource))
        with self._lock:
            self._points.extend(received)
            self.requests += 1
        return Response(ExportMetricsServiceResponse().SerializeToString(), media_type=PROTOBUF)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/traces", self._traces, methods=["POST"]),
                Route("/v1/metrics", self._metrics, methods=["POST"]),
            ]
        )


def _points(metric: Any, resource: dict[str, Any]) -> Iterator[ReceivedPoint]:
    kind = metric.WhichOneof("data")
    if kind == "sum":
        for p in metric.sum.data_points:
            number = p.as_int if p.WhichOneof("value") == "as_int" else p.as_double
            yield ReceivedPoint(metric.name, attributes(p.attributes), float(number), 0, resource)
    elif kind == "histogram":
        for h in metric.histogram.data_points:
            yield ReceivedPoint(metric.name, attributes(h.attributes), h.sum, h.count, resource)


@contextmanager
def otlp_receiver() -> Iterator[OTLPReceiver]:
    """A receiver listening until the block ends."""
    receiver = OTLPReceiver()
    with serve_in_thread(receiver.app(), "the OTLP receiver") as url:
        receiver.url = url
        yield receiver
