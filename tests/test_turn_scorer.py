"""Scoring the user's turn: which audio the model hears, when, and through one queue."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from pipeline.events import (
    Event,
    SpeechPausing,
    SpeechStarted,
    SpeechStopped,
    TurnEndScore,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.hearing.smart_turn import WINDOW, SmartTurnModel
from pipeline.hearing.turn_scorer import (
    PRE_ROLL_SECONDS,
    SCORED_SILENCE,
    TurnScorer,
    TurnScoring,
)
from pipeline.services.workers import PoolSaturated
from testkit.turn_clips import RATE, render

FRAME = 320


@pytest.fixture(scope="module")
def scorer() -> TurnScorer:
    return TurnScorer(SmartTurnModel())


def feed(scoring: TurnScoring, audio: np.ndarray, t0: float = 0.0) -> float:
    """Push ``audio`` in 20 ms frames from ``t0``; returns the time after it."""
    for i in range(0, audio.size - audio.size % FRAME, FRAME):
        scoring.push_audio(audio[i : i + FRAME].tobytes(), t0 + i / RATE)
    return t0 + (audio.size - audio.size % FRAME) / RATE


async def until_any(events: list[Event]) -> None:
    """Wait (at most 2 s) for the first event to come in."""
    for _ in range(200):
        if events:
            return
        await asyncio.sleep(0.01)


def ramp(seconds: float) -> np.ndarray:
    """Samples that say where they came from: sample i holds i % 30000."""
    return (np.arange(round(seconds * RATE)) % 30000).astype(np.int16)


def test_the_clip_runs_from_the_first_speech_less_the_pre_roll_to_now(
    scorer: TurnScorer,
) -> None:
    scoring = TurnScoring(scorer, lambda _e: None)
    audio = ramp(3.0)
    feed(scoring, audio)
    scoring.handle(SpeechStarted(1.0))
    scoring.handle(SpeechStarted(2.0))  # later speech in the same turn: still from 1.0
    clip = scoring.clip()
    start = round((1.0 - PRE_ROLL_SECONDS) * RATE)
    assert np.array_equal(clip, audio[start:])
    scoring.handle(UserTurnStarted(1.2, "vad"))
    scoring.handle(UserTurnStopped(2.5, "adaptive"))  # the next turn starts afresh
    scoring.handle(SpeechStarted(2.8))
    assert scoring.clip().size == round((3.0 - 2.8 + PRE_ROLL_SECONDS) * RATE)


def test_a_long_turn_keeps_its_last_8_s_across_the_ring(scorer: TurnScorer) -> None:
    scoring = TurnScoring(scorer, lambda _e: None)
    audio = ramp(23.0)  # wraps the ring twice
    scoring.handle(SpeechStarted(0.5))
    feed(scoring, audio)
    clip = scoring.clip()
    assert clip.size == WINDOW
    assert np.array_equal(clip, audio[-WINDOW:])


async def test_a_pause_in_a_turn_is_scored_once_with_its_speech_end(scorer: TurnScorer) -> None:
    events: list[Event] = []
    scoring = TurnScoring(scorer, events.append, clock=lambda: 42.0)
    speech = render("What time does the museum open?", "hibari")
    audio = np.concatenate([np.zeros(RATE // 2, np.int16), speech, np.zeros(RATE // 5, np.int16)])
    scoring.handle(SpeechStopped(0.3))  # outside a turn: not scored
    feed(scoring, audio)
    scoring.handle(SpeechStarted(0.5))
    scoring.handle(UserTurnStarted(0.7, "vad"))
    scoring.handle(SpeechStopped(0.5 + speech.size / RATE))
    await until_any(events)
    assert len(events) == 1
    score = events[0]
    assert isinstance(score, TurnEndScore) and score.t == 42.0
    assert score.speech_end == 0.5 + speech.size / RATE and score.probability > 0.9
    assert scoring.last is not None and scoring.last.inference > 0
    await scoring.close()


async def test_an_early_pause_is_scored_once_its_silence_is_in(scorer: TurnScorer) -> None:
    events: list[Event] = []
    scoring = TurnScoring(scorer, events.append)
    t = feed(scoring, ramp(1.0))  # the speech ends at 1.0
    scoring.handle(SpeechStarted(0.2))
    scoring.handle(UserTurnStarted(0.4, "vad"))
    scoring.handle(SpeechPausing(1.0 - 0.04))  # 40 ms of silence so far
    t = feed(scoring, np.zeros(FRAME, np.int16), t)
    await asyncio.sleep(0.05)
    assert t < 0.96 + SCORED_SILENCE and scoring.last is None  # not yet
    t = feed(scoring, np.zeros(3 * FRAME, np.int16), t)
    scoring.handle(SpeechStopped(0.96))  # the same pause: not scored again
    await until_any(events)
    await asyncio.sleep(0.05)
    assert [e.speech_end for e in events if isinstance(e, TurnEndScore)] == [0.96]
    await scoring.close()


async def test_a_stop_scores_a_pause_whose_silence_never_came(scorer: TurnScorer) -> None:
    events: list[Event] = []
    scoring = TurnScoring(scorer, events.append)
    feed(scoring, ramp(1.0))
    scoring.handle(SpeechStarted(0.2))
    scoring.handle(UserTurnStarted(0.4, "vad"))
    scoring.handle(SpeechPausing(0.98))
    scoring.handle(SpeechStopped(0.98))  # the audio stopped (the VAD's idle timeout)
    await until_any(events)
    assert [e.speech_end for e in events if isinstance(e, TurnEndScore)] == [0.98]
    await scoring.close()


async def test_a_newer_pause_drops_the_older_request_still_queued(scorer: TurnScorer) -> None:
    gate = threading.Event()
    blocker = asyncio.ensure_future(scorer.pool.run(gate.wait))  # the worker is busy
    await asyncio.sleep(0.05)
    events: list[Event] = []
    scoring = TurnScoring(scorer, events.append)
    feed(scoring, ramp(1.0))
    scoring.handle(SpeechStarted(0.1))
    scoring.handle(UserTurnStarted(0.3, "vad"))
    dropped = scorer.pool.stats().dropped
    scoring.handle(SpeechStopped(0.5))
    await asyncio.sleep(0.05)
    scoring.handle(SpeechStopped(0.9))  # the user spoke again and paused again
    await asyncio.sleep(0.05)
    assert scorer.pool.stats().dropped == dropped + 1  # never ran
    gate.set()
    await blocker
    await until_any(events)
    assert [e.speech_end for e in events if isinstance(e, TurnEndScore)] == [0.9]
    await scoring.close()


async def test_a_full_queue_fails_fast() -> None:
    small = TurnScorer(SmartTurnModel(), max_queue=1)
    gate = threading.Event()
    busy = [asyncio.ensure_future(small.pool.run(gate.wait)) for _ in range(2)]
    await asyncio.sleep(0.05)
    with pytest.raises(PoolSaturated):
        await small.score(np.zeros(RATE, np.int16))
    gate.set()
    await asyncio.gather(*busy)
    assert 0.0 <= (await small.score(np.zeros(RATE, np.int16))).probability <= 1.0
    small.shutdown()
