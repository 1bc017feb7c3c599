"""The per-session transcriber on real audio, the real Silero VAD and the real whisper STT.

espeak-ng sentences placed in silence are fed as 20 ms frames to the VAD and to the
transcriber, one frame per event-loop turn (as the transport delivers them), and the
VAD's events go to the transcriber. Nothing is mocked: :class:`TimedSTT` only notes
when the real :class:`LocalSTT` is called.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.events import (
    Event,
    SpeechFalseStart,
    SpeechOnset,
    SpeechStarted,
    SpeechStopped,
    Transcription,
)
from pipeline.hearing.transcriber import Transcriber
from pipeline.hearing.vad import VADAnalyzer
from pipeline.services.embedded import EmbeddedModels
from pipeline.services.local_stt import SHORT_WINDOW_DECODING, LocalSTT
from pipeline.services.model_files import ModelFileError
from pipeline.services.stt import Transcript
from testkit.speech import espeak, timeline
from testkit.vad_feed import frames

DRAGON = "Please tell me a short story about a friendly dragon."
BOOK = "Can you recommend a good book to read?"


@pytest.fixture(scope="module")
def models() -> Iterator[EmbeddedModels]:
    """whisper tiny.en: these tests are about cutting and ordering utterances, and tiny.en
    hears their espeak sentences reliably (base turns "Can you recommend a good book"
    without its lead-in into "you recommend.org"; its accuracy is bench/stt_wer.py's)."""
    registry = EmbeddedModels(llm="smollm2-135m", stt="whisper-tiny.en")
    asyncio.run(registry.stt.get())
    yield registry
    registry.shutdown()


@pytest.fixture(scope="module")
def stt(models: EmbeddedModels) -> LocalSTT:
    return LocalSTT(models)


@dataclass
class TimedSTT:
    """The real STT, with the frame index at which each call began and ended."""

    inner: LocalSTT
    frame: int = 0
    calls: list[tuple[int, float]] = field(default_factory=list)  # (frame, seconds of audio)
    finished: list[int] = field(default_factory=list)

    async def transcribe(self, pcm: np.ndarray, sample_rate: int = 16000) -> Transcript:
        self.calls.append((self.frame, pcm.size / sample_rate))
        try:
            return await self.inner.transcribe(pcm, sample_rate)
        finally:
            self.finished.append(self.frame)


@dataclass
class Run:
    events: list[Event]  # VAD events and transcriptions, in the order they happened
    stop_frames: list[int]  # the frame index of each SpeechStopped


async def feed(
    transcriber: Transcriber, samples: np.ndarray, stt: TimedSTT, events: list[Event]
) -> Run:
    """Frames to the VAD and the transcriber; ``events`` is the list the transcriber
    emits into, so VAD events and transcriptions land in the order they happened."""
    vad = VADAnalyzer()
    stops: list[int] = []
    for index, (frame, t) in enumerate(frames(samples)):
        stt.frame = index
        transcriber.push_audio(frame, t)
        for event in vad.push(frame, t):
            if isinstance(event, SpeechOnset | SpeechFalseStart):
                continue  # tentative: the transcriber ignores them
            events.append(event)
            transcriber.handle(event)
            if isinstance(event, SpeechStopped):
                stops.append(index)
        await asyncio.sleep(0)  # one loop turn per frame, as with a live transport
    await settle(transcriber)
    return Run(events, stops)


async def settle(transcriber: Transcriber, limit: float = 30.0) -> None:
    """Wait for the pending transcriptions (generous: the box may be busy)."""
    deadline = time.monotonic() + limit
    while transcriber.pending and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def texts(events: list[Event]) -> list[str]:
    return [e.text for e in events if isinstance(e, Transcription)]


async def test_utterance_is_transcribed_from_speech_stopped(stt: LocalSTT) -> None:
    line = timeline(0.8, espeak(DRAGON), 1.2)
    timed = TimedSTT(stt)
    events: list[Event] = []
    transcriber = Transcriber(timed, events.append, pre_roll_secs=0.3)
    run = await feed(transcriber, line.samples, timed, events)

    kinds = [type(e) for e in run.events]
    assert kinds == [SpeechStarted, SpeechStopped, Transcription]
    assert "friendly dragon" in texts(run.events)[0].lower()
    transcription = run.events[-1]
    assert isinstance(transcription, Transcription) and transcription.final
    # The STT began in the same frame as SpeechStopped: no later frame was needed.
    assert [frame for frame, _ in timed.calls] == run.stop_frames
    # It got onset - pre-roll .. speech end + tail.
    onset, end = line.truth[0]
    start, stop = transcriber.last_span
    assert abs(start - (onset - 0.3)) < 0.1 and abs(stop - (end + 0.15)) < 0.1
    assert timed.calls[0][1] == pytest.approx(stop - start, abs=0.001)
    assert transcriber.last_ttfb is not None and transcriber.last_processing is not None
    await transcriber.close()


async def test_second_utterance_queues_behind_the_first(stt: LocalSTT) -> None:
    line = timeline(0.5, espeak(DRAGON), 1.0, espeak(BOOK), 1.2)
    timed = TimedSTT(stt)
    events: list[Event] = []
    transcriber = Transcriber(timed, events.append)
    run = await feed(transcriber, line.samples, timed, events)

    said = texts(run.events)
    assert len(said) == 2
    assert "dragon" in said[0].lower() and "book" in said[1].lower()
    assert len(timed.calls) == 2
    # Each call started at its stop, or once the one before it had finished.
    for (called, _), stop in zip(timed.calls, run.stop_frames, strict=True):
        assert called >= stop
    assert timed.calls[1][0] >= timed.finished[0]


async def test_speech_resuming_right_after_a_stop_is_not_sent_twice(stt: LocalSTT) -> None:
    # A pre-roll longer than the pause between two utterances would reach back into
    # audio the first already sent (a short pause and a long pre-roll do the same).
    line = timeline(0.5, espeak(DRAGON), 1.0, espeak(BOOK), 1.2)
    timed = TimedSTT(stt)
    events: list[Event] = []
    transcriber = Transcriber(timed, events.append, pre_roll_secs=1.5)
    spans: list[tuple[float, float]] = []
    original = transcriber._submit

    def submit(end: float, keep_recording: bool = False, early: Any = None) -> None:
        original(end, keep_recording, early)
        assert transcriber.last_span is not None
        spans.append(transcriber.last_span)

    transcriber._submit = submit  # type: ignore[method-assign]
    run = await feed(transcriber, line.samples, timed, events)
    assert len(texts(run.events)) == 2 and len(spans) == 2
    (_, first_end), (second_start, _) = spans
    assert second_start >= first_end - 1e-6  # no sample of the first went again
    await transcriber.close()


async def test_frames_arriving_in_a_burst_are_not_cut_short(stt: LocalSTT) -> None:
    # The event loop stalls for 2 s as the user starts speaking: the frames of that time
    # then arrive together, stamped ~0.3 ms apart, and so are the VAD's event times.
    line = timeline(0.8, espeak(BOOK), 1.5)
    events: list[Event] = []
    transcriber = Transcriber(stt, events.append)
    vad = VADAnalyzer()
    for frame, t in frames(line.samples):
        arrived = 2.8 + (t - 0.8) * 0.015 if 0.8 <= t < 2.8 else t
        transcriber.push_audio(frame, arrived)
        for event in vad.push(frame, arrived):
            events.append(event)
            transcriber.handle(event)
        await asyncio.sleep(0)
    await settle(transcriber)
    said = texts(events)
    assert len(said) == 1 and "good book to read" in said[0].lower()
    start, stop = transcriber.last_span
    assert stop - start > (line.truth[0][1] - line.truth[0][0])  # all of the speech went
    await transcriber.close()


async def test_stt_errors_go_to_on_error(tmp_path: Path) -> None:
    broken = LocalSTT(EmbeddedModels(package_dirs={"stt": tmp_path}))
    errors: list[Exception] = []
    emitted: list[Event] = []
    transcriber = Transcriber(broken, emitted.append, on_error=errors.append)
    line = timeline(0.5, espeak(BOOK), 1.2)
    vad = VADAnalyzer()
    for frame, t in frames(line.samples):
        transcriber.push_audio(frame, t)
        for event in vad.push(frame, t):
            transcriber.handle(event)
    for _ in range(200):
        if errors:
            break
        await asyncio.sleep(0.01)
    assert len(errors) == 1 and isinstance(errors[0], ModelFileError)
    assert emitted == []
    await transcriber.close()


async def test_close_cancels_pending_transcriptions(stt: LocalSTT) -> None:
    emitted: list[Event] = []
    transcriber = Transcriber(stt, emitted.append)
    speech = espeak(BOOK)
    for frame, t in frames(np.concatenate([np.zeros(8000, np.int16), speech])):
        transcriber.push_audio(frame, t)
    transcriber.handle(SpeechStarted(0.5))
    transcriber.handle(SpeechStopped(0.5 + speech.size / 16000))
    assert transcriber.pending == 1 and not transcriber.recording
    await transcriber.close()
    assert transcriber.pending == 0
    await asyncio.sleep(0.5)
    assert emitted == []


async def test_long_speech_is_sent_in_pieces_of_max_utterance(stt: LocalSTT) -> None:
    timed = TimedSTT(stt)
    transcriber = Transcriber(timed, lambda e: None, pre_roll_secs=0.0, max_utterance_secs=2.0)
    speech = espeak(DRAGON)  # ~3 s
    transcriber.handle(SpeechStarted(0.0))
    for frame, t in frames(speech):
        transcriber.push_audio(frame, t)
    transcriber.handle(SpeechStopped(speech.size / 16000))
    assert transcriber.pending == 2
    await settle(transcriber)
    durations = [seconds for _, seconds in timed.calls]
    assert durations[0] == pytest.approx(2.0, abs=0.001)
    assert sum(durations) == pytest.approx((speech.size - speech.size % 320) / 16000, abs=0.02)
    await transcriber.close()


async def test_an_utterance_without_words_gives_an_empty_final_transcript(stt: LocalSTT) -> None:
    # The turn logic waits for the words of every utterance, so "none" must be said too.
    events: list[Event] = []
    transcriber = Transcriber(stt, events.append)
    silence = np.zeros(320, np.int16).tobytes()
    for n in range(50):
        transcriber.push_audio(silence, n * 0.02)
    transcriber.handle(SpeechStarted(0.4))
    transcriber.handle(SpeechStopped(0.9))
    await settle(transcriber)
    assert [(type(e), e.text, e.final) for e in events] == [(Transcription, "", True)]
    await transcriber.close()


# -- streaming ------------------------------------------------------------------------------


async def paced(transcriber: Transcriber, samples: np.ndarray, events: list[Event]) -> None:
    """Frames at (about) real time, so interim passes run while the user speaks."""
    vad = VADAnalyzer()
    begin = time.perf_counter()
    for frame, t in frames(samples):
        await asyncio.sleep(max(0.0, begin + t - time.perf_counter()))
        transcriber.push_audio(frame, t)
        for event in vad.push(frame, t):
            if not isinstance(event, SpeechOnset | SpeechFalseStart):
                events.append(event)
                transcriber.handle(event)
    await settle(transcriber)


@pytest.mark.e2e
@pytest.mark.parametrize("sentence", [DRAGON, BOOK])
async def test_streaming_gives_the_one_shot_text(models: EmbeddedModels, sentence: str) -> None:
    line = timeline(0.5, espeak(sentence), 1.2)
    stt = LocalSTT(models, SHORT_WINDOW_DECODING)
    streamed: list[Event] = []
    streaming = Transcriber(stt, streamed.append, streaming=True)
    await paced(streaming, line.samples, streamed)
    assert streaming.streaming and streaming.interim_passes >= 1
    assert streaming.last_span is not None
    one_shot = await stt.transcribe(
        line.samples[round(streaming.last_span[0] * 16000) : round(streaming.last_span[1] * 16000)]
    )
    assert texts(streamed) == [one_shot.text]
    assert [type(e) for e in streamed] == [SpeechStarted, SpeechStopped, Transcription]
    await streaming.close()


async def test_interim_passes_are_skipped_while_the_pool_is_busy(
    models: EmbeddedModels, stt: LocalSTT
) -> None:
    pool = models.stt.pool
    release = threading.Event()
    blocker = asyncio.ensure_future(pool.run(release.wait, 30))
    await asyncio.sleep(0.05)  # the blocking call holds the only worker
    events: list[Event] = []
    transcriber = Transcriber(stt, events.append, streaming=True)
    line = timeline(0.5, espeak(DRAGON), 1.2)
    vad = VADAnalyzer()
    for frame, t in frames(line.samples):
        transcriber.push_audio(frame, t)
        for event in vad.push(frame, t):
            if isinstance(event, SpeechStarted | SpeechStopped):
                transcriber.handle(event)
        await asyncio.sleep(0)
    assert transcriber.interim_passes == 0 and transcriber.interim_skipped >= 1
    assert pool.stats().queued == 1  # only the final pass waits; no interim queued
    release.set()
    await blocker
    await settle(transcriber)
    assert len(texts(events)) == 1 and "dragon" in texts(events)[0].lower()
    await transcriber.close()
