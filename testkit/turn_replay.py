"""Replay a user turn through the real turn-taking path, in virtual time.

The production pieces, with the real models: Silero VAD, the transcriber (cutting
utterances at the VAD's events) on an STT service, the turn audio scored by the
end-of-turn model, and the user-turn controller with its stop strategy. Only time is
simulated: audio goes in 20 ms frames on a virtual clock, and the STT's and the model's
answers are delivered ``stt_delay`` and ``model_delay`` seconds after they were asked
for, whatever they really took (so a slow machine measures the same as a fast one).

What comes out, per clip: when the turn stopped (or stopped early, in the middle of a
pause: the bot would answer half a turn and talk over the user), how long after the
speech ended, and the predictions the preemptive reply would have started on, wasted
or not.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pipeline.events import (
    Event,
    Transcription,
    TurnEndScore,
    UserTurnEndPredicted,
    UserTurnStopped,
)
from pipeline.hearing.smart_turn import SmartTurnModel
from pipeline.hearing.transcriber import Transcriber
from pipeline.hearing.turn_scorer import TurnScoring
from pipeline.hearing.vad import VADAnalyzer, VADParams
from pipeline.services.stt import STTService, Transcript
from pipeline.turns import UserTurnParams, UserTurns
from testkit.turn_clips import RATE, TurnClip

FRAME = 320  # 20 ms at 16 kHz
LEAD_SECONDS = 0.5  # silence before the clip
TAIL_SECONDS = 3.5  # silence after it: longer than any wait


@dataclass
class Replay:
    """What happened to one clip. Times are seconds from the start of the clip's speech."""

    clip: TurnClip
    stops: list[float] = field(default_factory=list)
    predictions: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    @property
    def early(self) -> bool:
        """The turn stopped before the user's last words began: a split, the bot talking
        over the user or answering half a turn."""
        return any(t < self.clip.last_onset for t in self.stops)

    @property
    def wait(self) -> float | None:
        """End of speech → the turn's stop, for a turn that stopped after its last words."""
        late = [t for t in self.stops if t >= self.clip.last_onset]
        return late[0] - self.clip.speech_end if late else None

    @property
    def wasted(self) -> int:
        """Predictions not followed by a stop before the user spoke again."""
        onsets = [start for start, _ in self.clip.stretches[1:]]
        wasted = 0
        for p in self.predictions:
            next_onset = min((o for o in onsets if o > p), default=None)
            stopped = any(p <= s and (next_onset is None or s < next_onset) for s in self.stops)
            wasted += not stopped
        return wasted

    def answered_after(self, reply_latency: float) -> float | None:
        """End of speech → first answer audio, if the reply takes ``reply_latency``
        seconds from the LLM's start: a reply started on a prediction in the same pause
        is ready earlier."""
        wait = self.wait
        if wait is None:
            return None
        stop = self.clip.speech_end + wait
        pause_start = max((e for _, e in self.clip.stretches if e <= stop), default=0.0)
        started = [p for p in self.predictions if pause_start <= p <= stop]
        ready = (started[0] if started else stop) + reply_latency
        return max(stop, ready) - self.clip.speech_end


class PerfectWords:
    """An STT service that hears every word of the clip right (see
    :func:`testkit.turn_clips.perfect_words`): it reads which part of the clip the
    transcriber sent from ``transcriber.last_span``."""

    def __init__(self, clip: TurnClip) -> None:
        self.clip = clip
        self.transcriber: Transcriber | None = None

    async def transcribe(self, pcm: np.ndarray, sample_rate: int = RATE) -> Transcript:
        assert self.transcriber is not None and self.transcriber.last_span is not None
        start, end = self.transcriber.last_span
        return Transcript(self.clip.heard(start - LEAD_SECONDS, end - LEAD_SECONDS))


class _Delayed:
    """A virtual-time agenda: events handed in now, delivered at a later time."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Event]] = []
        self._order = itertools.count()

    def add(self, at: float, event: Event) -> None:
        heapq.heappush(self._heap, (at, next(self._order), event))

    def due(self, now: float) -> list[Event]:
        out = []
        while self._heap and self._heap[0][0] <= now:
            out.append(heapq.heappop(self._heap)[2])
        return out


class TurnReplayer:
    """Runs clips through VAD → transcriber + turn scoring → user turns (see module)."""

    def __init__(
        self,
        stt: STTService | None,
        model: SmartTurnModel | None,
        params: UserTurnParams,
        stt_delay: float = 0.05,
        model_delay: float = 0.05,
        vad: VADParams | None = None,
    ) -> None:
        self.stt = stt
        self.model = model
        self.params = params
        self.stt_delay = stt_delay
        self.model_delay = model_delay
        self.vad_params = vad or VADParams(confidence=0.7, start_secs=0.2, stop_secs=0.2)

    async def replay(self, clip: TurnClip) -> Replay:
        result = Replay(clip)
        now = 0.0
        agenda = _Delayed()
        lead = LEAD_SECONDS

        def collect(event: Event) -> None:
            at = getattr(event, "t", now) - lead
            if isinstance(event, UserTurnStopped):
                result.stops.append(at)
            elif isinstance(event, UserTurnEndPredicted):
                result.predictions.append(at)
            scoring.handle(event)

        def transcribed(event: Event) -> None:
            assert isinstance(event, Transcription)
            result.texts.append(event.text)
            agenda.add(now + self.stt_delay, Transcription(event.text, now + self.stt_delay))

        turns = UserTurns(self.params, emit=collect)
        vad = VADAnalyzer(self.vad_params)
        perfect = PerfectWords(clip)
        transcriber = Transcriber(self.stt or perfect, transcribed, clock=lambda: now)
        if self.stt is None:
            perfect.transcriber = transcriber
        scoring = _ReplayScoring(self, agenda, result, lambda: now)
        audio = np.concatenate(
            [np.zeros(round(lead * RATE), np.int16), clip.audio,
             np.zeros(round(TAIL_SECONDS * RATE), np.int16)]
        )  # fmt: skip
        try:
            for start in range(0, audio.size - FRAME + 1, FRAME):
                now = start / RATE
                for event in agenda.due(now):
                    turns.handle(event)
                frame = audio[start : start + FRAME].tobytes()
                transcriber.push_audio(frame, now)
                scoring.push_audio(frame, now)
                for event in vad.push(frame, now):
                    scoring.handle(event)
                    transcriber.handle(event)
                    turns.handle(event)
                while transcriber.pending:  # real STT time, no virtual time
                    await asyncio.sleep(0.005)
                turns.advance(now + FRAME / RATE)
        finally:
            await transcriber.close()
        return result


class _ReplayScoring(TurnScoring):
    """The session's turn scoring with the model called in place, its answer delivered
    ``model_delay`` later in virtual time."""

    def __init__(
        self,
        replayer: TurnReplayer,
        agenda: _Delayed,
        result: Replay,
        clock: Callable[[], float],
    ) -> None:
        self._replayer = replayer
        self._agenda = agenda
        self._result = result
        self._now = clock
        super().__init__(
            scorer=None,  # type: ignore[arg-type]  # none: _request calls the model itself
            emit=lambda _e: None,
            clock=clock,
        )

    def _request(self, speech_end: float) -> None:
        if self._replayer.model is None:
            return
        probability = self._replayer.model.predict(self.clip())
        self._result.scores.append(probability)
        at = self._now() + self._replayer.model_delay
        self._agenda.add(at, TurnEndScore(at, probability, speech_end))


def summary(replays: list[Replay], reply_latency: float) -> dict[str, object]:
    """Figures over a set of replays: early ends, waits and answers, wasted predictions."""
    paused = [r for r in replays if r.clip.paused]
    complete = [r for r in replays if not r.clip.paused]
    waits = sorted(w for r in complete if (w := r.wait) is not None)
    answers = sorted(a for r in complete if (a := r.answered_after(reply_latency)) is not None)

    def pct(values: list[float], q: float) -> float | None:
        return (
            round(values[min(len(values) - 1, round(q * (len(values) - 1)))], 3) if values else None
        )

    return {
        "clips": len(replays),
        "paused_turns_ended_early": sum(r.early for r in paused),
        "paused_turns": len(paused),
        "complete_turns_ended_early": sum(r.early for r in complete),
        "complete_turns_never_ended": sum(r.wait is None for r in complete),
        "complete_wait_p50": pct(waits, 0.5),
        "complete_wait_p95": pct(waits, 0.95),
        "complete_wait_max": waits[-1] if waits else None,
        "answer_after_speech_p50": pct(answers, 0.5),
        "answer_after_speech_p95": pct(answers, 0.95),
        "predictions": sum(len(r.predictions) for r in replays),
        "wasted_predictions": sum(r.wasted for r in replays),
    }
