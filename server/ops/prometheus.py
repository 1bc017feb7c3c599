"""A small Prometheus metrics registry and its text exposition format (version 0.0.4).

Counters, gauges and histograms, each with optional labels; a gauge can also be read
from a function at scrape time. Updates take one lock per metric family, so they may
come from any thread; they are meant for events (turns, errors, requests), not for
per-audio-frame work.

    registry = Registry()
    errors = registry.counter("parley_errors_total", "Errors.", ["kind"])
    errors.labels("llm").inc()
    registry.render()  # the text a scraper reads
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds: from a few milliseconds (TTFB of a fast model) to tens of seconds.
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

LabelValues = tuple[str, ...]
# One sample line: name suffix, label values, histogram bucket bound (or None), value.
Sample = tuple[str, LabelValues, str | None, float]


def format_value(value: float) -> str:
    """A sample value as the format spells it (``+Inf``, ``NaN``, integers without ``.0``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels_text(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    pairs = ",".join(f'{n}="{escape_label(v)}"' for n, v in zip(names, values, strict=True))
    return "{" + pairs + "}"


class MetricFamily:
    """One named metric and its children, one per combination of label values."""

    kind = "untyped"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()

    def _key(self, values: Sequence[object], named: Mapping[str, object]) -> LabelValues:
        if named:
            values = [named[n] for n in self.labelnames]
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values!r}")
        return tuple(str(v) for v in values)

    def samples(self) -> Iterator[Sample]:
        """One (name suffix, label values, ``le`` bound or None, value) per sample line."""
        raise NotImplementedError

    def render(self) -> str:
        lines = [f"# HELP {self.name} {escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]
        for suffix, values, le, value in self.samples():
            if le is None:
                labels = _labels_text(self.labelnames, values)
            else:
                labels = _labels_text((*self.labelnames, "le"), (*values, le))
            lines.append(f"{self.name}{suffix}{labels} {format_value(value)}")
        return "\n".join(lines) + "\n"


class _Value:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


class Counter(MetricFamily):
    """A value that only goes up (restarts at 0 with the process)."""

    kind = "counter"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help, labelnames)
        self._values: dict[LabelValues, _Value] = {}
        if not self.labelnames:
            self._values[()] = _Value()

    def labels(self, *values: object, **named: object) -> CounterChild:
        key = self._key(values, named)
        with self._lock:
            if key not in self._values:
                self._values[key] = _Value()
        return CounterChild(self, key)

    def inc(self, amount: float = 1.0) -> None:
        self._add((), amount)

    def _add(self, key: LabelValues, amount: float) -> None:
        if amount < 0:
            raise ValueError("a counter cannot go down")
        with self._lock:
            slot = self._values.get(key)
            if slot is None:
                slot = self._values[key] = _Value()
            slot.value += amount

    def value(self, *values: object) -> float:
        slot = self._values.get(tuple(str(v) for v in values))
        return slot.value if slot else 0.0

    def samples(self) -> Iterator[Sample]:
        with self._lock:
            items = [(k, v.value) for k, v in self._values.items()]
        for key, value in sorted(items):
            yield "", key, None, value


class CounterChild:
    __slots__ = ("_family", "_key")

    def __init__(self, family: Counter, key: LabelValues) -> None:
        self._family = family
        self._key = key

    def inc(self, amount: float = 1.0) -> None:
        self._family._add(self._key, amount)


GaugeFunction = Callable[[], float | Mapping[LabelValues, float] | None]


class Gauge(MetricFamily):
    """A value that goes up and down; or, with ``function``, one read at scrape time
    (a number, or a mapping of label values to numbers for a labelled gauge)."""

    kind = "gauge"

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        function: GaugeFunction | None = None,
    ) -> None:
        super().__init__(name, help, labelnames)
        self.function = function
        self._values: dict[LabelValues, float] = {}

    def set(self, value: float, *labels: object) -> None:
        key = self._key(labels, {})
        with self._lock:
            self._values[key] = float(value)

    def inc(self, amount: float = 1.0, *labels: object) -> None:
        key = self._key(labels, {})
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def dec(self, amount: float = 1.0, *labels: object) -> None:
        self.inc(-amount, *labels)

    def samples(self) -> Iterator[Sample]:
        if self.function is not None:
            read = self.function()
            if read is None:
                return
            if isinstance(read, Mapping):
                for key, value in sorted(read.items()):
                    yield "", tuple(str(v) for v in key), None, float(value)
            else:
                yield "", (), None, float(read)
            return
        with self._lock:
            items = sorted(self._values.items())
        for key, value in items:
            yield "", key, None, value


class FunctionCounter(Gauge):
    """A counter kept elsewhere (e.g. the process's CPU time), read at scrape time."""

    kind = "counter"

    def __init__(self, name: str, help: str, function: GaugeFunction) -> None:
        super().__init__(name, help, (), function)


class _Buckets:
    __slots__ = ("count", "counts", "sum")

    def __init__(self, size: int) -> None:
        self.counts = [0] * size
        self.sum = 0.0
        self.count = 0


class Histogram(MetricFamily):
    """Observations counted into cumulative ``le`` buckets, with their sum and count."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        super().__init__(name, help, labelnames)
        if "le" in self.labelnames:
            raise ValueError("'le' is reserved for histogram buckets")
        bounds = sorted(float(b) for b in buckets if not math.isinf(b))
        self.bounds = tuple(bounds)
        self._series: dict[LabelValues, _Buckets] = {}
        if not self.labelnames:
            self._series[()] = _Buckets(len(self.bounds))

    def labels(self, *values: object, **named: object) -> HistogramChild:
        return HistogramChild(self, self._key(values, named))

    def observe(self, value: float) -> None:
        self._observe((), value)

    def _observe(self, key: LabelValues, value: float) -> None:
        index = bisect.bisect_left(self.bounds, value)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Buckets(len(self.bounds))
            if index < len(self.bounds):
                series.counts[index] += 1
            series.sum += value
            series.count += 1

    def count(self, *values: object) -> int:
        series = self._series.get(tuple(str(v) for v in values))
        return series.count if series else 0

    def samples(self) -> Iterator[Sample]:
        with self._lock:
            items = [(k, list(s.counts), s.sum, s.count) for k, s in self._series.items()]
        for key, counts, total, count in sorted(items):
            running = 0
            for bound, n in zip(self.bounds, counts, strict=True):
                running += n
                yield "_bucket", key, format_value(bound), running
            yield "_bucket", key, "+Inf", count
            yield "_sum", key, None, total
            yield "_count", key, None, count


class HistogramChild:
    __slots__ = ("_family", "_key")

    def __init__(self, family: Histogram, key: LabelValues) -> None:
        self._family = family
        self._key = key

    def observe(self, value: float) -> None:
        self._family._observe(self._key, value)


class Registry:
    """The metric families of one app, rendered together for ``/metrics``."""

    def __init__(self) -> None:
        self._families: dict[str, MetricFamily] = {}
        self._lock = threading.Lock()

    def register(self, family: MetricFamily) -> MetricFamily:
        with self._lock:
            if family.name in self._families:
                raise ValueError(f"metric {family.name!r} is already registered")
            self._families[family.name] = family
        return family

    def counter(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Counter:
        family = Counter(name, help, labelnames)
        self.register(family)
        return family

    def gauge(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        function: GaugeFunction | None = None,
    ) -> Gauge:
        family = Gauge(name, help, labelnames, function)
        self.register(family)
        return family

    def counter_function(self, name: str, help: str, function: GaugeFunction) -> FunctionCounter:
        family = FunctionCounter(name, help, function)
        self.register(family)
        return family

    def histogram(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> Histogram:
        family = Histogram(name, help, labelnames, buckets)
        self.register(family)
        return family

    def get(self, name: str) -> MetricFamily | None:
        return self._families.get(name)

    def render(self) -> str:
        """Every family in the text exposition format 0.0.4."""
        with self._lock:
            families = list(self._families.values())
        return "".join(family.render() for family in families)
