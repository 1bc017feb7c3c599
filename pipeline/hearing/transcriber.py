"""Per-session speech-to-text: cut utterances out of the audio at the VAD's events.

The transcriber sees the same 20 ms frames as the VAD (:meth:`Transcriber.push_audio`)
and the VAD's events (:meth:`Transcriber.handle`). Until the user speaks it only keeps a
short ring of recent frames. ``SpeechStarted`` arrives ``start_secs`` after the onset it
reports, so recording begins with the ring's frames from ``onset - pre_roll_secs``
(whisper misses clipped first phonemes) and goes on with every new frame.
``SpeechStopped`` arrives when the VAD's silence window closes; the utterance up to
``speech end + tail_secs`` goes to the STT service at once, as a task, so transcription
runs while the turn logic waits out its own stop window. The text is emitted as a final
:class:`~pipeline.events.Transcription`, an empty one too (an utterance without words,
such as a cough): the turn logic waits for every utterance's words before it ends a turn.

Utterances are transcribed one after another, so transcripts stay in order. A recording
longer than ``max_utterance_secs`` is sent off at that length and recording goes on
(whisper reads at most 30 s at a time). A failed STT hands the utterance to
``fallback`` (:mod:`pipeline.hearing.recognition`); failures go to ``on_error``, and
the session goes on. A live STT (Deepgram, AssemblyAI) hears each recorded frame as it
arrives; the stop (or the pause, for early words) asks it for the words so far.

Streaming (``streaming=True``; off by default: on two cores it left more STT time after
the stop, not less, see :mod:`pipeline.services.local_stt`), with an STT
that can (a :class:`~pipeline.services.stt.StreamingSTTService`,
such as the embedded whisper): while the user speaks, an interim pass reads the
recording so far whenever ``interim_secs`` of new audio (and at least twice the last
pass's duration, so passes take at most about half of the time on long speech) have
arrived since the last one, no pass of this session is in flight and the service is
idle; otherwise it is skipped, never queued. The words two passes agree on are
committed, and the final pass at the stop generates only the rest, so less is left to
do once the user has stopped. The emitted transcripts are the same as without streaming:
one final :class:`~pipeline.events.Transcription` per utterance, in order.

Early words (``SpeechPausing``, the VAD's first ``pause_secs`` of silence): the
utterance so far goes to the STT on speculation, and its text comes out as an interim
(not final) :class:`~pipeline.events.Transcription`, so the turn logic can foresee the
end of a clear question. If the stop that follows ends the same speech, that result *is*
the utterance's final text: no second request, and the words are in when the stop
window closes instead of an STT round trip later. If the user speaks on, the
speculation is cancelled (one wasted request). A local model is asked only when idle:
on two cores a speculative pass would delay other calls' words.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

import numpy as np
from loguru import logger

from pipeline.events import Event, SpeechPausing, SpeechStarted, SpeechStopped, Transcription
from pipeline.hearing.recognition import Recognition
from pipeline.services.stt import StreamingSTTService, STTService, STTStream, Transcript
from pipeline.task_cancel import cancel_and_wait

SAMPLE_RATE = 16000
# The ring must reach back past the pre-roll from the moment SpeechStarted arrives: the
# VAD reports it start_secs (0.2 s) or more after the onset.
_LOOKBACK_SECS = 2.0
_INITIAL_SECS = 5.0  # first allocation of the recording buffer; it doubles as needed
# Event times are on the frames' arrival clock. While it keeps pace with the samples
# (within this much), a time maps to a sample; see Transcriber._cut.
_CLOCK_TOLERANCE_SECS = 0.1
# A skipped interim pass (the STT was busy) is tried again after this much more audio.
_RETRY_SECS = 0.2


def _retrieved(task: asyncio.Task[Transcript]) -> None:
    if not task.cancelled():
        task.exception()


def _end_of(t: float, pcm: np.ndarray) -> float:
    return t + pcm.size / SAMPLE_RATE


class Transcriber:
    """Cuts one session's utterances at the VAD's events and transcribes them in order.

    ``emit`` gets each :class:`Transcription`, stamped with ``clock()`` (the session
    clock) when its text is ready. ``last_ttfb`` is the seconds from ``SpeechStopped``
    to the text (queueing included); ``last_processing`` the STT call alone.
    """

    def __init__(  # noqa: PLR0913  keyword-only options of one session's hearing
        self,
        stt: STTService,
        emit: Callable[[Event], None],
        pre_roll_secs: float = 0.3,
        max_utterance_secs: float = 30.0,
        *,
        tail_secs: float = 0.15,
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[Exception], None] | None = None,
        streaming: bool = False,
        interim_secs: float = 1.0,
        fallback: STTService | None = None,
        unheard: str | None = None,
    ) -> None:
        if pre_roll_secs < 0 or tail_secs < 0 or max_utterance_secs <= 1.0:
            raise ValueError("pre_roll_secs and tail_secs must be >= 0, max_utterance_secs > 1")
        self.stt = stt
        # Live (one stream per call, fed as it records) or per utterance; the fallback.
        self.recognition = Recognition(stt, fallback)
        # Emitted as the words of an utterance the STT failed on, when another model
        # heard its audio (speech to speech): that turn is still answered.
        self.unheard = unheard
        self.pre_roll_secs = pre_roll_secs
        self.max_utterance_secs = max_utterance_secs
        self.tail_secs = tail_secs
        self._emit = emit
        self._clock = clock
        self._on_error = on_error
        self._ring: deque[tuple[float, np.ndarray]] = deque()
        self._ring_secs = pre_roll_secs + _LOOKBACK_SECS
        self._buffer = np.zeros(0, np.int16)
        self._fill = 0
        self._recording = False
        self._closed = False
        self._rec_start = 0.0  # session time of the buffer's first sample
        self._rec_end = 0.0  # arrival-clock end of the last frame recorded
        self._tail: asyncio.Task[None] | None = None  # the last queued transcription
        self._tasks: set[asyncio.Task[None]] = set()
        self.last_ttfb: float | None = None
        self.last_processing: float | None = None
        self.last_span: tuple[float, float] | None = None  # session times sent to the STT
        self.last_submitted: float | None = None  # clock() when the last utterance was sent
        self.streaming = streaming and isinstance(stt, StreamingSTTService)
        self._interim_samples = round(interim_secs * SAMPLE_RATE)
        self._stream: STTStream | None = None  # the utterance being recorded, streamed
        self._next_pass = 0  # recorded samples at which the next interim pass may start
        self._interim: asyncio.Task[None] | None = None  # this session's pass in flight
        self._interims: set[asyncio.Task[None]] = set()
        self.interim_passes = 0  # passes run (not skipped), for benches and tests
        self.interim_skipped = 0  # passes skipped because the STT was busy
        # The speculative pass of the current pause: (speech end, its task).
        self._early: tuple[float, asyncio.Task[Transcript]] | None = None
        self.early_used = 0  # speculative passes that became an utterance's final text
        self.early_wasted = 0  # ... cancelled because the user spoke on

    @property
    def recording(self) -> bool:
        return self._recording

    @property
    def pending(self) -> int:
        """Utterances sent to the STT whose text has not been emitted yet."""
        return len(self._tasks)

    def push_audio(self, frame: bytes, t: float) -> None:
        """Take one frame (16 kHz mono s16; ``t`` = its start on the session clock).
        Feed every frame, before or after the VAD sees it."""
        if self._closed:
            return
        pcm = np.frombuffer(frame, dtype=np.int16)
        if self._recording:
            self._append(pcm)
            self._rec_end = _end_of(t, pcm)
            if self._stream is not None and self._fill >= self._next_pass:
                self._maybe_interim()
            return
        self._ring.append((t, pcm))
        # Frames are views of the transport's bytes; the ring only holds references.
        while self._ring and t - _end_of(*self._ring[0]) > self._ring_secs:
            self._ring.popleft()

    def handle(self, event: Event) -> None:
        """Take a VAD event; others are ignored."""
        if self._closed:
            return
        if isinstance(event, SpeechStarted):
            if not self._recording:
                # The pre-roll never reaches back into audio already sent: speech that
                # resumes right after a stop would have its first word transcribed twice.
                sent = self.last_span[1] if self.last_span is not None else float("-inf")
                self._start(max(event.t - self.pre_roll_secs, sent))
        elif isinstance(event, SpeechPausing) and self._recording:
            self._speculate(event.t)
        elif isinstance(event, SpeechStopped) and self._recording:
            self._submit(event.t + self.tail_secs, early=self._take_early(event.t))

    async def close(self) -> None:
        """Stop recording and cancel the transcriptions not yet emitted; later audio
        and events are ignored."""
        self._closed = True
        self._recording = False
        self._ring.clear()
        self._stream = None
        early, self._early = self._early, None
        await cancel_and_wait(self._interims | self._tasks | ({early[1]} if early else set()))
        await self.recognition.close()

    # -- recording ------------------------------------------------------------------------

    def _start(self, begin: float) -> None:
        self._recording = True
        self._fill = 0
        self._open_stream()
        if self._buffer.size == 0:
            self._buffer = np.zeros(round(_INITIAL_SECS * SAMPLE_RATE), np.int16)
        self._rec_start = begin
        first = True
        for t, pcm in self._ring:
            if _end_of(t, pcm) <= begin:
                continue
            skip = max(0, round((begin - t) * SAMPLE_RATE))
            if first:
                # The recording's clock starts at its first sample actually kept.
                self._rec_start = t + skip / SAMPLE_RATE
                first = False
            self._append(pcm[skip:])
            self._rec_end = _end_of(t, pcm)
        self._ring.clear()

    def _append(self, pcm: np.ndarray) -> None:
        limit = round(self.max_utterance_secs * SAMPLE_RATE)
        while pcm.size:
            room = limit - self._fill
            if room == 0:  # a monologue: send what we have, record on
                end = self._rec_start + self._fill / SAMPLE_RATE
                self._submit(end, keep_recording=True)
                continue
            part, pcm = pcm[:room], pcm[room:]
            end = self._fill + part.size
            if end > self._buffer.size:
                grown = np.zeros(min(limit, max(end, 2 * self._buffer.size)), np.int16)
                grown[: self._fill] = self._buffer[: self._fill]
                self._buffer = grown
            self._buffer[self._fill : end] = part
            self._fill = end
            self.recognition.feed(part)

    def _cut(self, end: float) -> int:
        """Samples up to session time ``end``, or all recorded if the clock drifted.

        When the event loop stalls, frames queue up and then arrive in a burst, stamped
        with nearly the same time; the VAD's times compress the same way. Cutting by
        time would then drop most of the speech, so when the frames' clock no longer
        matches the samples recorded, the whole recording (speech plus the VAD's stop
        window of silence, which whisper ignores) is sent instead.
        """
        drift = (self._rec_end - self._rec_start) - self._fill / SAMPLE_RATE
        if abs(drift) > _CLOCK_TOLERANCE_SECS:
            return self._fill
        return min(self._fill, max(0, round((end - self._rec_start) * SAMPLE_RATE)))

    def _submit(
        self,
        end: float,
        keep_recording: bool = False,
        early: asyncio.Task[Transcript] | None = None,
    ) -> None:
        if keep_recording:
            self._drop_early()  # the recording is cut: a speculation would repeat words
        count = self._cut(end)
        utterance = self._buffer[:count].copy()
        self.last_span = (self._rec_start, self._rec_start + count / SAMPLE_RATE)
        stream, interim = self._stream, self._interim
        self._stream, self._interim = None, None
        if keep_recording:
            self._rec_start += count / SAMPLE_RATE
        else:
            self._recording = False
            # The recording's last seconds become the ring: speech resuming right after
            # the stop still gets its pre-roll.
            keep = min(self._fill, round(self._ring_secs * SAMPLE_RATE))
            start = self._fill - keep
            tail = self._buffer[start : self._fill].copy()
            self._ring.append((self._rec_start + start / SAMPLE_RATE, tail))
        self._fill = 0
        if keep_recording:
            self._open_stream()
        if count == 0:
            return
        self.last_submitted = self._clock()
        if early is None and self.recognition.live is not None:
            # Asked now: the request covers exactly the audio fed up to this stop.
            early = self.recognition.request(utterance, SAMPLE_RATE)
            early.add_done_callback(_retrieved)
        task = asyncio.get_running_loop().create_task(
            self._transcribe(utterance, self._tail, self.last_submitted, stream, interim, early)
        )
        self._tail = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- streaming ----------------------------------------------------------------------

    def _open_stream(self) -> None:
        self._stream = None
        self._next_pass = self._interim_samples
        if self.streaming and isinstance(self.stt, StreamingSTTService):
            self._stream = self.stt.open_stream()

    def _maybe_interim(self) -> None:
        """Start an interim pass over the recording so far, if one may run now."""
        stream = self._stream
        if stream is None or self._interim is not None:
            return
        if not stream.idle():
            self.interim_skipped += 1
            self._next_pass = self._fill + round(_RETRY_SECS * SAMPLE_RATE)
            return
        # One copy per pass (about once a second), never per frame.
        pcm = self._buffer[: self._fill].copy()
        task = asyncio.get_running_loop().create_task(self._run_interim(stream, pcm))
        self._interim = task
        self._interims.add(task)
        task.add_done_callback(self._interims.discard)

    async def _run_interim(self, stream: STTStream, pcm: np.ndarray) -> None:
        started = time.perf_counter()
        try:
            committed = await stream.interim(pcm, SAMPLE_RATE)
        except Exception as exc:  # an interim pass is optional: the final one reports
            logger.debug("interim transcription failed: {}", exc)
            committed = None
        took = time.perf_counter() - started
        if committed is None:
            self.interim_skipped += 1
        else:
            self.interim_passes += 1
        if self._stream is stream:  # still recording this utterance
            self._interim = None
            wait = max(self._interim_samples, round(2 * took * SAMPLE_RATE))
            self._next_pass = pcm.size + wait

    # -- early words --------------------------------------------------------------------

    def _speculate(self, speech_end: float) -> None:
        """Send the utterance up to ``speech_end`` (and the tail heard so far) now."""
        self._drop_early()
        if self._stream is not None:
            return  # streaming: the interim passes already follow the words
        if isinstance(self.stt, StreamingSTTService) and not self.stt.idle():
            return
        count = self._cut(speech_end + self.tail_secs)
        if count == 0:
            return
        pcm = self._buffer[:count].copy()
        request = self.recognition.request(pcm, SAMPLE_RATE)
        task = asyncio.get_running_loop().create_task(self._early_pass(request, speech_end))
        task.add_done_callback(_retrieved)  # a dropped pass's error is nobody's
        self._early = (speech_end, task)

    async def _early_pass(self, request: asyncio.Task[Transcript], speech_end: float) -> Transcript:
        # An error is raised at the stop that takes this pass, as its own would be (the
        # service retried what it could already); a pass spoken through is forgotten.
        try:
            transcript = await request
        finally:
            request.cancel()
        early = self._early
        text = transcript.text.strip()
        if early is not None and early[0] == speech_end and text:  # still pausing there
            self._emit(
                Transcription(text, self._clock(), final=False, language=transcript.language)
            )
        return transcript

    def _take_early(self, speech_end: float) -> asyncio.Task[Transcript] | None:
        """The speculative pass for the stop of the speech that ended at ``speech_end``."""
        early = self._early
        if early is None or early[0] != speech_end:
            self._drop_early()
            return None
        self._early = None
        self.early_used += 1
        return early[1]

    def _drop_early(self) -> None:
        early, self._early = self._early, None
        if early is not None:
            task = early[1]
            if task.done() and not task.cancelled() and task.exception() is None:
                self.recognition.restore(task.result())  # live: words no utterance kept
            task.cancel()
            self.early_wasted += 1

    # -- transcription ------------------------------------------------------------------

    async def _transcribe(
        self,
        pcm: np.ndarray,
        previous: asyncio.Task[None] | None,
        submitted: float,
        stream: STTStream | None = None,
        interim: asyncio.Task[None] | None = None,
        early: asyncio.Task[Transcript] | None = None,
    ) -> None:
        if previous is not None and not previous.done():
            # Wait without inheriting its fate: a failed or cancelled one is not ours.
            await asyncio.wait([previous])
        if interim is not None and not interim.done():
            # Its words will be committed: the final pass then generates fewer.
            await asyncio.wait([interim])
        started = time.perf_counter()
        try:
            if early is not None:
                # The speculative pass heard this very utterance (or, live, the request).
                transcript = await early
            elif stream is not None:
                transcript = await stream.finish(pcm, SAMPLE_RATE)
            else:
                transcript = await self.recognition.transcribe(pcm, SAMPLE_RATE)
        except Exception as exc:
            self._report(exc)
            if self.unheard is not None:
                self._emit(Transcription(self.unheard, self._clock(), final=True))
            return
        self.last_processing = time.perf_counter() - started
        now = self._clock()
        self.last_ttfb = now - submitted
        text = transcript.text.strip()
        self._emit(Transcription(text, now, final=True, language=transcript.language))

    def _report(self, exc: Exception) -> None:
        if self._on_error is None:
            logger.warning("transcription failed: {}", exc)
        else:
            self._on_error(exc)
