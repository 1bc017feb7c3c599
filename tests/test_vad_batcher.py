"""The VAD batcher: every session's windows scored together, off the event loop, with the
same results as scoring each session inline.

Real Silero on espeak-ng speech; nothing is mocked. Models that fail or record threads
are the real model with one method wrapped.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from pipeline.events import Event, SpeechOnset, SpeechStarted, SpeechStopped
from pipeline.hearing.silero import SAMPLE_RATE, SileroModel
from pipeline.hearing.vad import VADAnalyzer
from pipeline.hearing.vad_batcher import VADBatcher
from testkit.speech import SENTENCE_A, SENTENCE_B, at_level, espeak, pink, timeline
from testkit.vad_feed import assert_same_events, frames, kinds, run


class RecordingModel(SileroModel):
    """The real model, recording each call's batch size and thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []  # (windows, thread id)
        self.fail_calls: set[int] = set()  # call numbers (from 0) that raise
        super().__init__()
        self.calls.clear()  # not the warm-up call

    def infer(self, windows: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.calls.append((windows.shape[0], threading.get_ident()))
        if len(self.calls) - 1 in self.fail_calls:
            raise RuntimeError("onnxruntime fell over")
        return super().infer(windows, state)


class RecordingAnalyzer(VADAnalyzer):
    """An analyzer that keeps every probability it was given."""

    def __init__(self, model: SileroModel) -> None:
        self.probabilities: list[float] = []
        super().__init__(model=model)

    def apply(self, prob: float, state: np.ndarray) -> list[Event]:
        self.probabilities.append(prob)
        return super().apply(prob, state)


@pytest.fixture(scope="module")
def recording() -> RecordingModel:
    return RecordingModel()


@pytest.fixture(scope="module")
def shared() -> SileroModel:
    return SileroModel.shared()


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    """Half a second of silence, a sentence, a second of silence."""
    return timeline(0.5, espeak(SENTENCE_A), 1.0).samples


@pytest.fixture(scope="module")
def streams() -> list[np.ndarray]:
    """Six sessions: two voices' worth of sentences at different phases, and quiet noise."""
    a, b = espeak(SENTENCE_A), espeak(SENTENCE_B)
    rng = np.random.default_rng(5)
    return [
        timeline(0.7, a, 1.0, b, 1.0).samples,
        timeline(0.26, b, 0.3, a, 1.5).samples,
        at_level(pink(rng, 5 * SAMPLE_RATE), -50),
        *(timeline(lead, a, 0.8).samples for lead in (0.31, 0.5, 1.07)),
    ]


async def drained(batcher: VADBatcher) -> None:
    for _ in range(2000):
        if not batcher.busy:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the batcher never went idle")


async def test_batched_off_the_loop_equals_inline_on_real_speech(
    recording: RecordingModel, streams: list[np.ndarray]
) -> None:
    inline = [RecordingAnalyzer(recording) for _ in streams]
    expected = [
        run(a, s, 3.0 * n, onsets=True)
        for n, (a, s) in enumerate(zip(inline, streams, strict=True))
    ]
    assert kinds(expected[0]) == [SpeechOnset, SpeechStarted, SpeechStopped] * 2
    recording.calls.clear()

    batcher = VADBatcher.for_loop(recording)
    analyzers = [RecordingAnalyzer(recording) for _ in streams]
    got: list[list[Event]] = [[] for _ in streams]
    for analyzer, events in zip(analyzers, got, strict=True):
        batcher.register(analyzer, events.extend)
    feeds = [frames(s, 3.0 * n) for n, s in enumerate(streams)]
    for tick in range(max(len(f) for f in feeds)):
        for n, (analyzer, feed) in enumerate(zip(analyzers, feeds, strict=True)):
            if tick < len(feed):
                analyzer.feed(*feed[tick])
                batcher.submit(analyzer)
            if n == 2:
                await asyncio.sleep(0)  # later sessions' frames land during an inference
        if tick % 9 == 0:
            await drained(batcher)  # otherwise backlogs build: several windows per session
        else:
            await asyncio.sleep(0)
    await drained(batcher)

    assert_same_events(got, expected)
    for mine, theirs in zip(analyzers, inline, strict=True):
        assert mine.probabilities == theirs.probabilities  # bit for bit
    loop_thread = threading.get_ident()
    assert recording.calls, "no inference ran"
    assert all(thread != loop_thread for _, thread in recording.calls), "Silero ran on the loop"
    sizes = [size for size, _ in recording.calls]
    assert max(sizes) > 1, f"every inference scored one window: {sizes[:20]}"
    assert sum(sizes) == sum(len(a.probabilities) for a in analyzers)
    assert batcher.inferences == len(sizes) and batcher.windows == sum(sizes)


async def test_a_failed_inference_counts_as_silence_and_the_vad_goes_on(
    recording: RecordingModel, speech: np.ndarray
) -> None:
    inline = run(VADAnalyzer(model=recording), speech, onsets=True)
    recording.calls.clear()
    recording.fail_calls = {0, 5}  # speech windows of both sessions
    try:
        batcher = VADBatcher.for_loop(recording)
        analyzers = [VADAnalyzer(model=recording) for _ in range(2)]
        got: list[list[Event]] = [[], []]
        for analyzer, events in zip(analyzers, got, strict=True):
            batcher.register(analyzer, events.extend)
        for frame in frames(speech):
            for analyzer in analyzers:
                analyzer.feed(*frame)
                batcher.submit(analyzer)
            await drained(batcher)
    finally:
        recording.fail_calls = set()
    assert recording.calls[5][0] == 2  # a failed call held both sessions' windows
    assert len(recording.calls) > 20  # and scoring went on after it
    for events in got:  # a window heard as silence mid-speech changes no decision
        assert kinds(events) == kinds(inline)


async def test_a_failing_session_does_not_cost_the_others_their_events(
    shared: SileroModel, speech: np.ndarray
) -> None:
    model = shared
    expected = kinds(run(VADAnalyzer(model=model), speech, onsets=True))
    batcher = VADBatcher.for_loop(model)
    broken, healthy = VADAnalyzer(model=model), VADAnalyzer(model=model)
    seen: list[Event] = []

    def explode(events: list[Event]) -> None:
        raise RuntimeError("a session's handler failed")

    batcher.register(broken, explode)
    batcher.register(healthy, seen.extend)
    for frame in frames(speech):
        for analyzer in (broken, healthy):
            analyzer.feed(*frame)
            batcher.submit(analyzer)
        await asyncio.sleep(0)
    await drained(batcher)
    assert kinds(seen) == expected
    assert broken.state is healthy.state  # its VAD went on too


async def test_an_unregistered_session_gets_nothing_and_others_go_on(
    shared: SileroModel, speech: np.ndarray
) -> None:
    model = shared
    expected = kinds(run(VADAnalyzer(model=model), speech, onsets=True))
    batcher = VADBatcher.for_loop(model)
    leaving, staying = VADAnalyzer(model=model), VADAnalyzer(model=model)
    left: list[Event] = []
    stayed: list[Event] = []
    batcher.register(leaving, left.extend)
    batcher.register(staying, stayed.extend)
    for index, frame in enumerate(frames(speech)):
        for analyzer in (leaving, staying):
            analyzer.feed(*frame)
            batcher.submit(analyzer)
        if index == 40:  # mid-speech, with its window pending or in flight
            assert batcher.busy
            batcher.unregister(leaving)
            gone = len(left)
        await asyncio.sleep(0)
    await drained(batcher)
    assert len(left) == gone
    assert kinds(stayed) == expected


def test_a_foreign_analyzer_is_refused(shared: SileroModel, recording: RecordingModel) -> None:
    async def register() -> None:
        VADBatcher.for_loop(shared).register(VADAnalyzer(model=recording), lambda _: None)

    with pytest.raises(ValueError, match="batcher's model"):
        asyncio.run(register())
