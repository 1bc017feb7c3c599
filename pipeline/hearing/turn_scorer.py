"""Scoring the user's turn with the end-of-turn model, off the event loop.

:class:`TurnScorer` is shared by every session: one worker thread runs the model (one
core, ~45 ms a clip here), and requests wait in a bounded queue. Clips are scored one at
a time, not batched: on a CPU a batch costs the same per clip and delays its first
answer (see :mod:`pipeline.hearing.smart_turn`).

:class:`TurnScoring` is one session's side: it keeps the last 8 s of the session's audio
and, at every pause the VAD reports, sends the turn so far (from its first speech, less
a short pre-roll, up to now: the model was trained on turns that end in a little
silence) to the scorer. A newer pause of the same session cancels the older request, so
a queued clip the answer would no longer matter for is dropped before it runs. Scores
come back as :class:`~pipeline.events.TurnEndScore` events. A pause is scored at its
``SpeechPausing`` already (the clip then ends in ~0.1 s of silence rather than 0.2 s:
the model was trained on short trailing silence), and not again at the stop of the same
speech, so the score is in when the stop window closes. The clip always holds at least
:data:`SCORED_SILENCE` after the speech: a pause reported sooner (so that the words'
early pass starts sooner) is scored once that much audio is in. With 64 ms instead of
96 the model read espeak's flat questions as unfinished more often (bench/RESULTS.md,
"Complete questions on a quiet machine").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from loguru import logger

from pipeline.events import (
    Event,
    SpeechPausing,
    SpeechStarted,
    SpeechStopped,
    TurnEndScore,
    UserTurnDiscarded,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.hearing.smart_turn import SAMPLE_RATE, WINDOW, SmartTurnModel
from pipeline.services.workers import WorkerPool
from pipeline.task_cancel import cancel_and_wait

PRE_ROLL_SECONDS = 0.3
# Silence after the speech that a scored clip ends in, at least (see the module docstring).
SCORED_SILENCE = 0.096
# The ring holds a little more than the model reads, for the pre-roll.
_RING = WINDOW + round(PRE_ROLL_SECONDS * SAMPLE_RATE) + SAMPLE_RATE


@dataclass(frozen=True, slots=True)
class Score:
    """One answer of the model: the probability, and where the time went (seconds)."""

    probability: float
    queued: float
    inference: float


class TurnScorer:
    """The end-of-turn model behind a queue, for every session of the process."""

    def __init__(self, model: SmartTurnModel | None = None, max_queue: int = 32) -> None:
        self.model = model or SmartTurnModel()
        self.pool = WorkerPool("end of turn (Smart Turn v3.2)", 1, max_queue)
        self.on_score: list[Callable[[Score], None]] = []  # observers (metrics)

    async def score(self, audio: np.ndarray) -> Score:
        """The probability that the turn in ``audio`` (16 kHz int16) is complete. Raises
        :class:`~pipeline.services.workers.PoolSaturated` when too many wait already."""
        submitted = time.perf_counter()
        started = 0.0

        def run() -> float:
            nonlocal started
            started = time.perf_counter()
            return self.model.predict(audio)

        probability = await self.pool.run(run)
        done = time.perf_counter()
        result = Score(probability, started - submitted, done - started)
        for observer in self.on_score:
            observer(result)
        return result

    def shutdown(self) -> None:
        self.pool.shutdown()


class TurnScoring:
    """One session's turn audio, scored at every pause; results go to ``emit``."""

    def __init__(
        self,
        scorer: TurnScorer,
        emit: Callable[[Event], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.scorer = scorer
        self._emit = emit
        self._clock = clock
        self._ring = np.zeros(_RING, np.int16)
        self._written = 0  # samples ever written; the ring holds the last _RING of them
        self._end = 0.0  # session time at the end of the last sample written
        self._onset: float | None = None  # first speech of the user's current turn
        self._in_turn = False
        self._task: asyncio.Task[None] | None = None
        self._scored: float | None = None  # the speech end last sent to the model
        self._due: float | None = None  # a speech end to score once SCORED_SILENCE is in
        self.last: Score | None = None

    def push_audio(self, frame: bytes, t: float) -> None:
        """One frame of 16 kHz mono s16 starting at session time ``t`` (every frame)."""
        pcm = np.frombuffer(frame, dtype=np.int16)
        n = pcm.size
        if n == 0:
            return
        if n >= _RING:
            pcm, n = pcm[-_RING:], _RING
        at = self._written % _RING
        first = min(n, _RING - at)
        self._ring[at : at + first] = pcm[:first]
        self._ring[: n - first] = pcm[first:]
        self._written += n
        self._end = t + pcm.size / SAMPLE_RATE
        if self._due is not None and self._end >= self._due + SCORED_SILENCE - 1e-6:
            self._request(self._due)

    def handle(self, event: Event) -> None:
        """VAD and turn events: track the turn's first speech, score at every pause of a
        user turn (feed a VAD event here before the turn logic sees it)."""
        if isinstance(event, SpeechStarted):
            if self._onset is None:
                self._onset = event.t
        elif isinstance(event, UserTurnStarted):
            self._in_turn = True
        elif isinstance(event, UserTurnStopped | UserTurnDiscarded):
            self._in_turn = False
            self._onset = self._due = None
        elif isinstance(event, SpeechPausing | SpeechStopped):
            if not self._in_turn or self._onset is None:
                return
            if event.t == self._due and isinstance(event, SpeechStopped):
                self._request(event.t)  # the audio stopped coming: score what there is
            elif event.t not in (self._scored, self._due):
                self._due = event.t
                if self._end >= event.t + SCORED_SILENCE - 1e-6:
                    self._request(event.t)

    def clip(self) -> np.ndarray:
        """The current turn from its first speech (less the pre-roll) up to now, at most
        the model's 8 s window."""
        onset = self._end if self._onset is None else self._onset
        seconds = self._end - onset + PRE_ROLL_SECONDS
        count = min(WINDOW, self._written, max(0, round(seconds * SAMPLE_RATE)))
        end = self._written % _RING
        if count <= end:
            return self._ring[end - count : end].copy()
        return np.concatenate([self._ring[_RING - (count - end) :], self._ring[:end]])

    def _request(self, speech_end: float) -> None:
        self._scored, self._due = speech_end, None
        if self._task is not None and not self._task.done():
            self._task.cancel()  # a newer pause: the older score would be stale
        self._task = asyncio.get_running_loop().create_task(
            self._score(self.clip(), speech_end), name="turn-score"
        )

    async def _score(self, audio: np.ndarray, speech_end: float) -> None:
        try:
            result = await self.scorer.score(audio)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the rule decides without the model; the call goes on
            logger.warning("end-of-turn model failed: {}", exc)
            return
        self.last = result
        self._emit(TurnEndScore(self._clock(), result.probability, speech_end))

    async def close(self) -> None:
        await cancel_and_wait([self._task])
