"""Session metrics: first TTFB per service and turn, processing totals, tokens and cost."""

from __future__ import annotations

from pipeline.events import Metric
from pipeline.messages import Usage
from pipeline.session_metrics import Prices, SessionMetrics, priced, rtvi_metrics


def test_cost_follows_prices_per_million_tokens() -> None:
    usage = priced(Usage(input_tokens=1000, output_tokens=500), Prices(input=2.0, output=8.0))
    assert usage.cost.input == 0.002 and usage.cost.output == 0.004
    assert abs(usage.cost.total - 0.006) < 1e-12


def test_turns_and_session_totals() -> None:
    metrics = SessionMetrics(Prices(input=1.0, output=1.0))
    for metric in (
        Metric("llm", "ttfb", 0.2, "m"),
        Metric("llm", "ttfb", 0.9, "m"),  # a second stream in the same turn: first one counts
        Metric("tts", "ttfb", 0.05),
        Metric("tts", "processing", 0.1),
        Metric("tts", "processing", 0.2),
        Metric("llm", "tokens", Usage(input_tokens=100, output_tokens=20)),
        Metric("tts", "characters", 42),
    ):
        metrics.record(metric)
    turn = metrics.end_turn()
    assert turn.ttfb == {"llm": 0.2, "tts": 0.05}
    assert abs(turn.processing["tts"] - 0.3) < 1e-9
    assert turn.usage.total_tokens == 120 and turn.tts_characters == 42
    metrics.record(Metric("llm", "tokens", Usage(input_tokens=10, output_tokens=10)))
    metrics.end_turn()
    assert metrics.end_turn().usage.total_tokens == 0, "an empty turn is not counted"
    summary = metrics.summary()
    assert summary["turns"] == 2
    assert summary["usage"]["total_tokens"] == 140
    assert summary["usage"]["cost_usd"] == 0.00014
    assert summary["ttfb_median"] == {"llm": 0.55, "tts": 0.05}


def test_rtvi_shapes() -> None:
    assert rtvi_metrics(Metric("llm", "ttfb", 0.123456, "gpt")) == {
        "ttfb": [{"processor": "llm", "model": "gpt", "value": 0.1235}]
    }
    tokens = rtvi_metrics(Metric("llm", "tokens", Usage(input_tokens=3, output_tokens=4)))
    assert tokens["tokens"][0]["value"] == {
        "prompt_tokens": 3,
        "completion_tokens": 4,
        "total_tokens": 7,
    }
