"""Turn-completion markers: complete answers pass without the marker, incomplete ones wait."""

from __future__ import annotations

import pytest

from pipeline.reply.turn_completion import (
    TurnCompletionConfig,
    TurnCompletionFilter,
    Verdict,
    strip_markers,
)


def run(chunks: list[str]) -> tuple[str, TurnCompletionFilter]:
    flt = TurnCompletionFilter()
    out = "".join(flt.feed(c) for c in chunks) + flt.finish()
    return out, flt


@pytest.mark.parametrize(
    ("chunks", "text", "verdict"),
    [
        (["✓ Sure, ", "it is four."], "Sure, it is four.", Verdict.COMPLETE),
        ([" ", "✓", " Hi", " there"], "Hi there", Verdict.COMPLETE),
        (["○"], "", Verdict.INCOMPLETE_SHORT),
        (["◐ ", "take your time"], "", Verdict.INCOMPLETE_LONG),
        (["No marker at all."], "No marker at all.", Verdict.COMPLETE),
        (["✓ a ✓ b"], "a  b", Verdict.COMPLETE),
        ([], "", Verdict.COMPLETE),
    ],
)
def test_verdicts(chunks: list[str], text: str, verdict: Verdict) -> None:
    out, flt = run(chunks)
    assert out == text
    assert flt.verdict is verdict


def test_reprompt_timeouts_follow_the_verdict() -> None:
    config = TurnCompletionConfig(incomplete_short_timeout=5, incomplete_long_timeout=15)
    _, short = run(["○"])
    _, long = run(["◐"])
    _, done = run(["✓ ok"])
    assert short.suppressed and long.suppressed and not done.suppressed
    assert short.reprompt_after(config) == (5, config.incomplete_short_prompt)
    assert long.reprompt_after(config) == (15, config.incomplete_long_prompt)
    assert done.reprompt_after(config) is None


def test_strip_markers_only_trims_when_a_marker_was_there() -> None:
    assert strip_markers("✓ Hello. ") == "Hello."
    assert strip_markers(" plain ") == " plain "
