"""``GET /metrics`` of a real app, served by prometheus_client and read back with its parser:
the documented names, types, labels and buckets, one registry per app, scrape-time gauges.
"""

from __future__ import annotations

import math

from fastapi.testclient import TestClient

from server import __version__
from server.api.app import create_app
from server.ops.metric_families import DURATION_BUCKETS, LAG_BUCKETS, LATENCY_BUCKETS
from server.ops.metrics import CONTENT_TYPE, ServerMetrics
from server.settings import Settings
from testkit.exposition import Scrape, parse

# Every family /metrics serves, as the parser names it (a counter without ``_total``), and
# its type: the metrics table in docs/operations.md. A name changed here is a dashboard broken.
FAMILIES = {
    "parley_info": "gauge",
    "parley_sessions_active": "gauge",
    "parley_sessions_created": "counter",
    "parley_sessions_closed": "counter",
    "parley_session_duration_seconds": "histogram",
    "parley_peer_connections": "gauge",
    "parley_user_turns": "counter",
    "parley_bot_turns": "counter",
    "parley_interruptions": "counter",
    "parley_voice_to_voice_seconds": "histogram",
    "parley_user_turn_end_wait_seconds": "histogram",
    "parley_turn_model_seconds": "histogram",
    "parley_preemptive_replies": "counter",
    "parley_user_turns_merged": "counter",
    "parley_bot_pauses": "counter",
    "parley_bot_pause_seconds": "histogram",
    "parley_user_speech_discarded": "counter",
    "parley_service_ttfb_seconds": "histogram",
    "parley_service_processing_seconds": "histogram",
    "parley_llm_tokens": "counter",
    "parley_tts_characters": "counter",
    "parley_llm_reasoning_tokens": "counter",
    "parley_llm_thought_characters": "counter",
    "parley_errors": "counter",
    "parley_http_responses": "counter",
    "parley_audio_packets_dropped": "counter",
    "parley_audio_packets_lost": "counter",
    "parley_audio_packets_late": "counter",
    "parley_event_loop_lag_seconds": "histogram",
    "parley_event_loop_lag_max_seconds": "gauge",
    "parley_threads": "gauge",
    "parley_asyncio_tasks": "gauge",
    "parley_models_ready": "gauge",
    "parley_draining": "gauge",
    "process_resident_memory_bytes": "gauge",
    "process_virtual_memory_bytes": "gauge",
    "process_open_fds": "gauge",
    "process_max_fds": "gauge",
    "process_cpu_seconds": "counter",
    "process_start_time_seconds": "gauge",
}


def _settings() -> Settings:
    return Settings(
        stt="openai", llm="openai", tts="openai", openai_base_url="http://127.0.0.1:9",
        preload_models=False, greeting="",
    )  # fmt: skip


def scrape(http: TestClient) -> Scrape:
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE
    return parse(response.text)


def test_every_documented_family_is_served_with_its_type() -> None:
    with TestClient(create_app(_settings())) as http:
        metrics = scrape(http)
    served = {name: family.type for name, family in metrics.families.items()}
    assert served == FAMILIES
    assert metrics.value("parley_info", version=__version__) == 1
    assert metrics.value("parley_sessions_active") == 0
    assert metrics.value("parley_draining") == 0
    assert metrics.value("parley_models_ready") == 1, "remote models: nothing to load"
    assert (metrics.value("parley_asyncio_tasks") or 0) >= 1, "read on the event loop"
    assert (metrics.value("process_resident_memory_bytes") or 0) > 10 * 2**20
    assert not [s.name for s in metrics.samples() if s.name.endswith("_created")]


def test_http_answers_are_counted_by_class() -> None:
    with TestClient(create_app(_settings())) as http:
        before = scrape(http)
        assert http.get("/no/such/route").status_code == 404
        assert http.get("/health").status_code == 200
        after = scrape(http)
    for code, moved in (("4xx", 1), ("2xx", 2)):  # /health, and the first /metrics
        was = before.value("parley_http_responses_total", code=code) or 0
        assert after.value("parley_http_responses_total", code=code) == was + moved, code


def test_each_app_has_its_own_registry() -> None:
    first, second = ServerMetrics(), ServerMetrics()  # the global registry would refuse
    first.sessions.created.inc(3)
    assert parse(first.render().decode()).value("parley_sessions_created_total") == 3
    assert parse(second.render().decode()).value("parley_sessions_created_total") == 0


def test_histograms_keep_their_buckets_and_le_is_inclusive() -> None:
    metrics = ServerMetrics()
    for value in (0.05, 0.1, 0.3, 20.0):
        metrics.services.ttfb.labels("llm").observe(value)
    metrics.sessions.duration.observe(30)
    metrics.loop_lag.observe(0.002)
    scraped = parse(metrics.render().decode())

    def bounds(name: str, **labels: str) -> list[float]:
        return [
            float(s.labels["le"])
            for s in scraped.samples()
            if s.name == f"{name}_bucket" and labels.items() <= s.labels.items()
        ]

    assert bounds("parley_service_ttfb_seconds", service="llm") == [*LATENCY_BUCKETS, math.inf]
    assert bounds("parley_session_duration_seconds") == [*DURATION_BUCKETS, math.inf]
    assert bounds("parley_event_loop_lag_seconds") == [*LAG_BUCKETS, math.inf]
    ttfb = {
        le: scraped.value("parley_service_ttfb_seconds_bucket", service="llm", le=le)
        for le in ("0.05", "0.1", "0.3", "10.0", "+Inf")
    }
    assert ttfb == {"0.05": 1, "0.1": 2, "0.3": 3, "10.0": 3, "+Inf": 4}
    assert scraped.value("parley_service_ttfb_seconds_count", service="llm") == 4
    assert math.isclose(scraped.value("parley_service_ttfb_seconds_sum", service="llm") or 0, 20.45)
    assert scraped.value("parley_session_duration_seconds_bucket", le="30.0") == 1


def test_label_values_round_trip_escaped() -> None:
    metrics = ServerMetrics()
    odd = 'peer said "bye"\\now\nnext'
    metrics.sessions.closed.labels(odd).inc()
    scraped = parse(metrics.render().decode())
    assert scraped.value("parley_sessions_closed_total", reason=odd) == 1
    escaped = 'reason="peer said \\"bye\\"\\\\now\\nnext"'  # as the exposition spells it
    assert scraped.total("parley_sessions_closed_total{" + escaped + "}") == 1


def test_a_selector_sums_the_samples_that_carry_its_labels() -> None:
    metrics = ServerMetrics()
    metrics.services.errors.labels("llm").inc(2)
    metrics.services.errors.labels("tts").inc()
    scraped = parse(metrics.render().decode())
    assert scraped.total("parley_errors_total") == 3
    assert scraped.total('parley_errors_total{kind="llm"}') == 2
    assert scraped.total('parley_errors_total{kind="stt"}') == 0
    assert scraped.total("parley_no_such_total") == 0
