"""One call's hearing: each inbound frame through the echo canceller, the VAD, the
transcriber and the end-of-turn model, and the VAD's events on to the turn logic.

The order is the data path (pipeline/README.md): the echo is taken out first (the
canceller matches the frame as the microphone gave it against what was played), then,
when ``PARLEY_NOISE_SUPPRESSION`` asks for it, the steady background noise, off the loop
(:mod:`pipeline.hearing.denoising`; the VAD hears those frames 31 ms and a worker's hop
later, dated back). The VAD hears what is left. The STT hears the echo-cancelled audio
without the suppression: RNNoise mangled espeak's voice (tiny.en's WER 10.9 → 33.6 %),
cost hibari in noise (1.0 → 2.3 %) and helped only espeak in noise on a phone line
(44.7 → 39.4 %; bench/RESULTS.md). While the echo path is unknown the STT hears
the audio as it came: the canceller may have damped the first syllables of a caller it
could not yet tell from an echo, and the recording reaches back to them, 0.3 s beyond the
pre-roll and from a false start just before if there was one
(:mod:`pipeline.hearing.rejoin`). Speech that began while the user was muted is ignored
whole, even where it goes on after mute ended: it is not transcribed, and it is reported
as a discard (:mod:`pipeline.hearing.discards`).

This module knows the conversation only by the few calls it makes (``feed``, ``tick``,
whether the user is muted, whether a pause is being judged).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.audio.echo import EchoCanceller, EchoPath
from pipeline.audio.noise_suppression import LATENCY, NoiseSuppressor
from pipeline.events import AudioIdle, Event, SpeechStarted, SpeechStopped
from pipeline.hearing.denoising import Denoising
from pipeline.hearing.discards import SpeechLedger
from pipeline.hearing.realtime_input import RealtimeInput
from pipeline.hearing.rejoin import FalseStartRejoin
from pipeline.hearing.transcriber import Transcriber
from pipeline.hearing.turn_scorer import TurnScoring
from pipeline.hearing.vad import VADAnalyzer, VADState
from pipeline.hearing.vad_batcher import VADBatcher


@dataclass
class TurnLogic:
    """What hearing tells the turn logic and asks it (the conversation provides them)."""

    feed: Callable[[Event], None]
    tick: Callable[[], None]
    muted: Callable[[], bool]


class Hearing:
    """Takes 16 kHz mono frames (:meth:`push_audio`) and feeds the turn logic."""

    def __init__(
        self,
        vad: VADAnalyzer,
        transcriber: Transcriber | RealtimeInput,
        turns: TurnLogic,
        discards: SpeechLedger,
        echo: EchoCanceller | None = None,
        turn_scoring: TurnScoring | None = None,
        level: Callable[[bytes, bool], None] | None = None,
        noise: NoiseSuppressor | None = None,
    ) -> None:
        self.vad = vad
        self.transcriber = transcriber
        self.turns = turns
        self.discards = discards
        self.echo = echo
        self.turn_scoring = turn_scoring
        self.level = level  # the user's level meter: (frame, speaking)
        self.noise = noise  # before the VAD only
        # Told what a VAD event's handler raised; None: raise.
        self.on_fault: Callable[[str, Exception], None] | None = None
        self._muted_utterance = False
        self._utterance_onset = 0.0
        self._batcher: VADBatcher | None = None
        self._denoising: Denoising | None = None
        self._rejoin = FalseStartRejoin()

    def start(self) -> None:
        """Score the VAD with every other session of this loop (off the loop)."""
        self._batcher = VADBatcher.for_loop(self.vad.model)
        self._batcher.register(self.vad, self.vad_events)
        if self.noise is not None:  # and denoise with them, in a worker
            self._denoising = Denoising.for_loop()

    def stop(self) -> None:
        if self._batcher is not None:
            self._batcher.unregister(self.vad)
        if self._denoising is not None and self.noise is not None:
            self._denoising.release(self.noise)
        elif self.noise is not None:
            self.noise.close()

    def push_audio(self, frame: bytes) -> None:
        """About 20 ms from the transport (every packet: keep cheap)."""
        t = time.monotonic()
        raw = frame
        if self.echo is not None:
            frame = self.echo.process(frame, t)
        if self.noise is None:
            self._hear(frame, t)
        elif self._denoising is not None:
            self._denoising.submit(self.noise, frame, t, self._hear_denoised)
        else:  # not started: no loop, so denoise inline
            self._hear_denoised(self.noise.process(frame), t)
        self.transcriber.push_audio(raw if self._path_unknown() else frame, t)
        if self.turn_scoring is not None:
            self.turn_scoring.push_audio(frame, t)
        self.turns.tick()
        if self.level is not None:
            self.level(frame, self.vad.state is not VADState.QUIET)

    def _hear(self, frame: bytes, t: float) -> None:
        """The VAD hears a frame that began at ``t``."""
        if self._batcher is not None:
            self.vad.feed(frame, t)
            self._batcher.submit(self.vad)  # its events come to vad_events
        else:  # not started: no loop to batch on, so score inline
            self.vad_events(self.vad.push(frame, t))

    def _hear_denoised(self, frame: bytes, t: float) -> None:
        # Denoised audio is LATENCY late: dated back, the VAD's onsets and ends are the
        # raw audio's, which the transcriber records.
        self._hear(frame, t - LATENCY)

    def vad_events(self, events: list[Event]) -> None:
        """The VAD's events, in order; one failing handler skips one event, not the call."""
        for event in events:
            try:
                self.vad_event(event)
            except Exception as exc:
                if self.on_fault is None:
                    raise
                self.on_fault(f"{type(event).__name__} handler", exc)
        if events:
            self.turns.tick()  # timers the events armed may be due already

    def vad_event(self, event: Event) -> None:
        if isinstance(event, SpeechStarted):
            self._muted_utterance = self.turns.muted()
            self._utterance_onset = event.t
        elif isinstance(event, SpeechStopped | AudioIdle) and self._muted_utterance:
            self.discards.muted_utterance(self._utterance_onset)
        if self.turn_scoring is not None:
            self.turn_scoring.handle(event)  # before the turn logic: it may end the turn
        self._rejoin.see(event)
        if not self._muted_utterance:  # muted speech is not even transcribed
            self.transcriber.handle(self._rejoin.for_stt(event, self._path_unknown()))
        self.turns.feed(event)

    def _path_unknown(self) -> bool:
        return self.echo is not None and self.echo.state is EchoPath.UNKNOWN

    def check_idle(self, t: float) -> None:
        """Audio that stopped arriving mid-speech ends the speech."""
        for event in self.vad.check_idle(t):
            self.vad_event(event)
