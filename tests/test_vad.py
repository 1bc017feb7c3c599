"""Silero VAD against speech with known timing: espeak-ng sentences placed in silence.

The truth for each sentence is its first and last sample above 1% of the clip's peak.
Everything runs on the real model; nothing is mocked.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from pipeline.events import (
    AudioIdle,
    Event,
    SpeechFalseStart,
    SpeechOnset,
    SpeechStarted,
    SpeechStopped,
)
from pipeline.hearing.silero import SAMPLE_RATE, SileroModel, find_silero_model
from pipeline.hearing.vad import VADAnalyzer, VADParams, VADState, window_volume
from pipeline.hearing.vad_batcher import VADBatch
from testkit.speech import SENTENCE_A, SENTENCE_B, at_level, espeak, pink, timeline
from testkit.vad_feed import FRAME, assert_same_events, frames, kinds, run

TOLERANCE = 0.1  # seconds, for onsets and ends


@pytest.fixture(scope="session")
def model() -> SileroModel:
    return SileroModel.shared()


@pytest.fixture(scope="session")
def sentence_a() -> np.ndarray:
    return espeak(SENTENCE_A)


@pytest.fixture(scope="session")
def sentence_b() -> np.ndarray:
    return espeak(SENTENCE_B)


# -- speech timing ------------------------------------------------------------------------


def assert_near(reported: float, true: float) -> None:
    assert abs(reported - true) <= TOLERANCE, f"reported {reported:.3f}, truth {true:.3f}"


@pytest.mark.parametrize("lead", [1.0, 1.011, 1.023])  # onsets at different window phases
def test_two_sentences_start_and_stop_at_the_truth(
    model: SileroModel, sentence_a: np.ndarray, sentence_b: np.ndarray, lead: float
) -> None:
    line = timeline(lead, sentence_a, 1.5, sentence_b, 2.0)
    t0 = 12.5  # a session clock that does not start at zero
    events = run(VADAnalyzer(model=model), line.samples, t0)
    assert kinds(events) == [SpeechStarted, SpeechStopped, SpeechStarted, SpeechStopped]
    for index, (onset, end) in enumerate(line.truth):
        assert_near(events[2 * index].t, t0 + onset)
        assert_near(events[2 * index + 1].t, t0 + end)


def test_pause_shorter_than_stop_secs_does_not_split(
    model: SileroModel, sentence_a: np.ndarray, sentence_b: np.ndarray
) -> None:
    line = timeline(0.5, sentence_a, 0.4, sentence_b, 1.2)
    events = run(VADAnalyzer(model=model), line.samples)
    assert kinds(events) == [SpeechStarted, SpeechStopped]
    assert_near(events[0].t, line.truth[0][0])
    assert_near(events[1].t, line.truth[1][1])


def test_pause_longer_than_stop_secs_splits(model: SileroModel, sentence_a: np.ndarray) -> None:
    line = timeline(0.5, sentence_a, 1.0, sentence_a, 1.2)
    events = run(VADAnalyzer(model=model), line.samples)
    assert kinds(events) == [SpeechStarted, SpeechStopped] * 2


def test_quiet_speech_is_heard(model: SileroModel, sentence_b: np.ndarray) -> None:
    line = timeline(1.0, at_level(sentence_b, -40), 1.2)
    events = run(VADAnalyzer(model=model), line.samples)
    assert kinds(events) == [SpeechStarted, SpeechStopped]
    assert_near(events[0].t, line.truth[0][0])


# -- no speech ----------------------------------------------------------------------------


@pytest.mark.parametrize("dbfs", [-60, -35])
def test_noise_is_not_speech(model: SileroModel, dbfs: float) -> None:
    rng = np.random.default_rng(3)
    for noise in (rng.standard_normal(4 * SAMPLE_RATE), pink(rng, 4 * SAMPLE_RATE)):
        analyzer = VADAnalyzer(model=model)
        assert run(analyzer, at_level(noise, dbfs)) == []
        assert analyzer.state is VADState.QUIET


def test_silence_is_not_speech(model: SileroModel) -> None:
    assert run(VADAnalyzer(model=model), np.zeros(3 * SAMPLE_RATE, np.int16)) == []


def test_min_volume_gates_very_quiet_speech(model: SileroModel, sentence_b: np.ndarray) -> None:
    faint = timeline(0.5, at_level(sentence_b, -65), 1.2).samples
    assert run(VADAnalyzer(model=model), faint) == []
    # The model alone does hear it: the gate is what keeps it out.
    ungated = VADAnalyzer(VADParams(min_volume=0.0), model=model)
    assert SpeechStarted in kinds(run(ungated, faint))


def test_onset_comes_first_with_the_same_time(model: SileroModel, sentence_a: np.ndarray) -> None:
    line = timeline(1.0, sentence_a, 1.0)
    events = run(VADAnalyzer(model=model), line.samples, onsets=True)
    assert kinds(events) == [SpeechOnset, SpeechStarted, SpeechStopped]
    assert events[0].t == events[1].t  # the onset the confirmation reports
    assert_near(events[0].t, line.truth[0][0])


def test_a_short_sound_is_a_false_start(model: SileroModel, sentence_a: np.ndarray) -> None:
    # 100 ms of speech: heard, but shorter than start_secs (0.2 s).
    blip = sentence_a[np.flatnonzero(np.abs(sentence_a) > 500)[0] :][: SAMPLE_RATE // 10]
    events = run(VADAnalyzer(model=model), timeline(0.5, blip, 1.0).samples, onsets=True)
    assert kinds(events) == [SpeechOnset, SpeechFalseStart]
    assert events[1].t > events[0].t


def test_audio_stopping_mid_onset_is_a_false_start(
    model: SileroModel, sentence_a: np.ndarray
) -> None:
    analyzer = VADAnalyzer(model=model)
    line = timeline(0.5, sentence_a)
    cut = round(0.6 * SAMPLE_RATE) // FRAME * FRAME  # 100 ms into the speech
    assert kinds(run(analyzer, line.samples[:cut], onsets=True)) == [SpeechOnset]
    events = analyzer.check_idle(cut / SAMPLE_RATE + 1.0)
    assert events == [SpeechFalseStart(cut / SAMPLE_RATE)]


def test_volume_scale() -> None:
    tone = np.sin(np.arange(512) * 0.3).astype(np.float32)  # RMS = -3 dBFS
    assert window_volume(np.zeros(512, np.float32)) == 0.0
    assert window_volume(tone) == 1.0
    assert window_volume(tone * 10 ** (-47 / 20)) == pytest.approx(0.6, abs=0.01)


# -- idle audio and reset -----------------------------------------------------------------


def test_audio_idle_ends_speech(model: SileroModel, sentence_a: np.ndarray) -> None:
    line = timeline(0.5, sentence_a)
    cut = (round(1.5 * SAMPLE_RATE) // FRAME) * FRAME  # mid-sentence
    analyzer = VADAnalyzer(model=model)
    assert kinds(run(analyzer, line.samples[:cut])) == [SpeechStarted]
    last_audio = cut / SAMPLE_RATE
    assert analyzer.check_idle(last_audio + 0.9) == []
    events = analyzer.check_idle(last_audio + 1.0)
    assert events == [SpeechStopped(last_audio), AudioIdle(last_audio + 1.0)]
    assert analyzer.state is VADState.QUIET
    assert analyzer.check_idle(last_audio + 5.0) == []


def test_audio_idle_timeout_zero_never_ends_speech(
    model: SileroModel, sentence_a: np.ndarray
) -> None:
    # Reference: audio_idle_timeout "Set to 0 to disable"; a negative one is refused.
    line = timeline(0.5, sentence_a)
    cut = (round(1.5 * SAMPLE_RATE) // FRAME) * FRAME  # mid-sentence, then no more audio
    analyzer = VADAnalyzer(VADParams(audio_idle_timeout=0), model=model)
    assert kinds(run(analyzer, line.samples[:cut])) == [SpeechStarted]
    assert analyzer.check_idle(cut / SAMPLE_RATE + 3600.0) == []
    assert analyzer.state is VADState.SPEAKING
    with pytest.raises(ValueError, match="audio_idle_timeout"):
        VADParams(audio_idle_timeout=-1)


def test_idle_without_speech_emits_nothing(model: SileroModel) -> None:
    analyzer = VADAnalyzer(model=model)
    assert analyzer.check_idle(10.0) == []
    run(analyzer, np.zeros(SAMPLE_RATE, np.int16))
    assert analyzer.check_idle(10.0) == []


def test_reset_forgets_speech(model: SileroModel, sentence_a: np.ndarray) -> None:
    analyzer = VADAnalyzer(model=model)
    assert kinds(run(analyzer, timeline(0.5, sentence_a).samples[: SAMPLE_RATE * 2])) == [
        SpeechStarted
    ]
    analyzer.reset()
    assert analyzer.state is VADState.QUIET
    assert run(analyzer, np.zeros(SAMPLE_RATE * 2, np.int16)) == []


def test_params_are_checked() -> None:
    with pytest.raises(ValueError):
        VADParams(confidence=1.5)
    with pytest.raises(ValueError):
        VADParams(stop_secs=0)


# -- batching across sessions -------------------------------------------------------------


@pytest.fixture(scope="session")
def three_streams(sentence_a: np.ndarray, sentence_b: np.ndarray) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [
        timeline(0.7, sentence_a, 1.0, sentence_b, 1.0).samples,
        timeline(0.26, sentence_b, 0.3, sentence_a, 1.5).samples,
        at_level(pink(rng, 5 * SAMPLE_RATE), -50),
    ]


def alone(model: SileroModel, streams: list[np.ndarray]) -> list[list[Event]]:
    return [run(VADAnalyzer(model=model), s, 3.0 * n, onsets=True) for n, s in enumerate(streams)]


def test_batched_sessions_equal_single_sessions(
    model: SileroModel, three_streams: list[np.ndarray]
) -> None:
    expected = alone(model, three_streams)
    assert kinds(expected[0]) == [SpeechOnset, SpeechStarted, SpeechStopped] * 2
    analyzers = [VADAnalyzer(model=model) for _ in three_streams]
    # Stream n starts n frames late, so windows become ready on different ticks.
    feeds = [[None] * n + frames(s, 3.0 * n) for n, s in enumerate(three_streams)]
    batch = VADBatch(model)
    got: list[list[Event]] = [[] for _ in analyzers]
    for tick in range(max(len(f) for f in feeds)):
        for analyzer, feed in zip(analyzers, feeds, strict=True):
            if tick < len(feed) and feed[tick] is not None:
                analyzer.feed(*feed[tick])
        for events, new in zip(got, batch.run(analyzers), strict=True):
            events += new
    assert_same_events(got, expected)


def test_inference_in_an_executor_while_frames_arrive(
    model: SileroModel, three_streams: list[np.ndarray]
) -> None:
    expected = alone(model, three_streams)
    analyzers = [VADAnalyzer(model=model) for _ in three_streams]
    feeds = [frames(s, 3.0 * n) for n, s in enumerate(three_streams)]
    batch = VADBatch(model)
    got: list[list[Event]] = [[] for _ in analyzers]

    def collect(results: list[list[Event]]) -> None:
        for events, new in zip(got, results, strict=True):
            events += new

    with ThreadPoolExecutor(1) as pool:
        for tick in range(max(len(f) for f in feeds)):
            staged = batch.stage(analyzers)
            future = pool.submit(batch.infer)
            # The next frames arrive while the staged windows are being inferred.
            for analyzer, feed in zip(analyzers, feeds, strict=True):
                if tick < len(feed):
                    analyzer.feed(*feed[tick])
            future.result()
            if staged:
                collect(batch.finish())
        collect(batch.run(analyzers))  # drain the last windows
    assert_same_events(got, expected)


def test_batch_rejects_a_foreign_model(model: SileroModel) -> None:
    other = SileroModel(find_silero_model())
    with pytest.raises(ValueError, match="share"):
        VADBatch(model).run([VADAnalyzer(model=other)])


class CountingModel(SileroModel):
    """The real model, counting the windows it is asked to score."""

    windows = 0

    def infer(self, windows: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.windows += windows.shape[0]
        return super().infer(windows, state)


def test_quiet_windows_skip_the_model_and_speech_after_them_is_on_time(
    sentence_a: np.ndarray,
) -> None:
    counting = CountingModel()
    rng = np.random.default_rng(7)
    room = at_level(rng.standard_normal(3 * SAMPLE_RATE), -70.0)  # a quiet room, 3 s
    analyzer = VADAnalyzer(model=counting)
    counting.windows = 0
    assert run(analyzer, room) == []
    assert counting.windows == 0, "a quiet room costs no inference"
    line = timeline(sentence_a, 1.5)
    events = run(analyzer, line.samples, 3.0)
    assert kinds(events) == [SpeechStarted, SpeechStopped]
    assert_near(events[0].t, 3.0 + line.truth[0][0])
    assert_near(events[1].t, 3.0 + line.truth[0][1])
    assert 0 < counting.windows < line.samples.size // 512, "only the loud part is scored"
