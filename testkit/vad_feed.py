"""Feeding audio to a VAD analyzer frame by frame, as the server does, and reading its events."""

from __future__ import annotations

from typing import Protocol, cast

import numpy as np
import pytest

from pipeline.events import (
    Event,
    SpeechFalseStart,
    SpeechOnset,
)
from pipeline.hearing.silero import SAMPLE_RATE
from pipeline.hearing.vad import VADAnalyzer

FRAME = 320  # 20 ms


def frames(samples: np.ndarray, t0: float = 0.0) -> list[tuple[bytes, float]]:
    usable = samples.size - samples.size % FRAME
    return [
        (samples[i : i + FRAME].tobytes(), t0 + i / SAMPLE_RATE) for i in range(0, usable, FRAME)
    ]


def run(
    analyzer: VADAnalyzer, samples: np.ndarray, t0: float = 0.0, onsets: bool = False
) -> list[Event]:
    """The events of ``samples`` fed frame by frame; the tentative ones (``SpeechOnset``,
    ``SpeechFalseStart``) only with ``onsets``."""
    events: list[Event] = []
    for frame, t in frames(samples, t0):
        events += analyzer.push(frame, t)
    if onsets:
        return events
    return [e for e in events if not isinstance(e, SpeechOnset | SpeechFalseStart)]


class _Timed(Protocol):
    t: float


def kinds(events: list[Event]) -> list[type[Event]]:
    return [type(e) for e in events]


def _times(events: list[Event]) -> list[float]:
    # cast: every event a VAD emits carries its time ``t`` (Event itself declares none).
    return [cast(_Timed, e).t for e in events]


def assert_same_events(got: list[list[Event]], expected: list[list[Event]]) -> None:
    # Times may differ in the last bits: the buffer clock re-anchors on every frame fed.
    assert [kinds(e) for e in got] == [kinds(e) for e in expected]
    for mine, theirs in zip(got, expected, strict=True):
        assert _times(mine) == pytest.approx(_times(theirs), abs=1e-9)
