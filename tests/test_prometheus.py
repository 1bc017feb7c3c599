"""The metrics registry and its text format, read back with a strict parser."""

from __future__ import annotations

import math
import threading

import pytest

from server.ops.prometheus import Registry, format_value
from testkit.prometheus_text import parse


def test_counters_gauges_and_labels_round_trip() -> None:
    registry = Registry()
    plain = registry.counter("jobs_total", "Jobs done.")
    by_kind = registry.counter("errors_total", "Errors.", ["kind"])
    level = registry.gauge("level", "A level.")
    plain.inc()
    plain.inc(2)
    by_kind.labels("llm").inc()
    by_kind.labels(kind="tts").inc(3)
    by_kind.labels("llm").inc()
    level.set(7.5)
    level.dec(0.5)
    metrics = parse(registry.render())
    assert metrics.families["jobs_total"].type == "counter"
    assert metrics.families["level"].type == "gauge"
    assert metrics.families["errors_total"].help == "Errors."
    assert metrics.value("jobs_total") == 3
    assert metrics.value("errors_total", kind="llm") == 2
    assert metrics.value("errors_total", kind="tts") == 3
    assert metrics.value("level") == 7


def test_label_values_and_help_are_escaped() -> None:
    registry = Registry()
    closed = registry.counter("closed_total", 'Closed, by "reason".\nSecond line \\ end.', ["r"])
    odd = 'peer said "bye"\\now\nnext'
    closed.labels(odd).inc()
    text = registry.render()
    assert "\\n" in text.splitlines()[0], "a newline in HELP is escaped"
    assert parse(text).value("closed_total", r=odd) == 1


def test_histogram_buckets_are_cumulative_with_sum_and_count() -> None:
    registry = Registry()
    latency = registry.histogram("latency_seconds", "Latency.", ["service"], (0.1, 0.5, 1.0))
    for value in (0.05, 0.1, 0.3, 0.7, 2.0):
        latency.labels("llm").observe(value)
    latency.labels("tts").observe(0.2)
    metrics = parse(registry.render())  # the parser checks cumulative buckets and +Inf
    buckets = {
        le: metrics.value("latency_seconds_bucket", service="llm", le=le)
        for le in ("0.1", "0.5", "1", "+Inf")
    }
    assert buckets == {"0.1": 2, "0.5": 3, "1": 4, "+Inf": 5}, "le is inclusive"
    assert metrics.value("latency_seconds_count", service="llm") == 5
    assert math.isclose(metrics.value("latency_seconds_sum", service="llm") or 0, 3.15)
    assert metrics.value("latency_seconds_count", service="tts") == 1


def test_function_gauges_are_read_at_scrape_time() -> None:
    registry = Registry()
    box = {"n": 1.0}
    registry.gauge("now", "Read when scraped.", function=lambda: box["n"])
    registry.gauge("by_state", "Per state.", ["state"], lambda: {("up",): 2, ("down",): 1})
    registry.gauge("missing", "Not available here.", function=lambda: None)
    registry.counter_function("cpu_total", "Kept elsewhere.", lambda: 12.5)
    assert parse(registry.render()).value("now") == 1
    box["n"] = 4
    metrics = parse(registry.render())
    assert metrics.value("now") == 4
    assert metrics.value("by_state", state="up") == 2
    assert metrics.families["missing"].samples == {}
    assert metrics.families["cpu_total"].type == "counter"


def test_special_values_are_spelled_as_the_format_wants() -> None:
    assert [format_value(v) for v in (math.inf, -math.inf, math.nan, 3.0, 0.25)] == [
        "+Inf",
        "-Inf",
        "NaN",
        "3",
        "0.25",
    ]
    registry = Registry()
    registry.gauge("odd", "Odd.").set(math.nan)
    assert math.isnan(parse(registry.render()).value("odd") or 0)


def test_misuse_is_refused() -> None:
    registry = Registry()
    counter = registry.counter("c_total", "C.", ["kind"])
    with pytest.raises(ValueError):
        registry.counter("c_total", "Again.")
    with pytest.raises(ValueError):
        counter.labels("a", "b")
    with pytest.raises(ValueError):
        counter.labels("a").inc(-1)
    with pytest.raises(ValueError):
        registry.histogram("h", "H.", ["le"])


def test_updates_from_many_threads_are_not_lost() -> None:
    registry = Registry()
    counter = registry.counter("hits_total", "Hits.", ["kind"])
    histogram = registry.histogram("h_seconds", "H.")

    def work() -> None:
        child = counter.labels("x")
        for _ in range(2000):
            child.inc()
            histogram.observe(0.01)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    metrics = parse(registry.render())
    assert metrics.value("hits_total", kind="x") == 16000
    assert metrics.value("h_seconds_count") == 16000


def test_the_parser_rejects_broken_text() -> None:
    for broken in (
        '# TYPE x counter\nx{a="1"} one\n',  # not a number
        "x 1\n",  # no TYPE
        "# TYPE x counter\ny 1\n",  # sample outside its family
        '# TYPE x counter\nx{a="1",a="2"} 1\n',  # duplicate label
        "# TYPE x counter\nx 1",  # no final newline
    ):
        with pytest.raises(AssertionError):
            parse(broken)
