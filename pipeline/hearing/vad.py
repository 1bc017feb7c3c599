"""Voice activity detection: Silero VAD on onnxruntime, one analyzer per audio stream.

Audio arrives as 20 ms frames of 16 kHz mono s16. Each session's :class:`VADAnalyzer`
buffers it into 32 ms windows (512 samples, plus the previous window's last 64 as
context, as Silero expects) and runs a QUIET → STARTING → SPEAKING → STOPPING state
machine on the speech probability. :meth:`VADAnalyzer.push` scores its windows inline,
one at a time (tests, offline replays). The server's sessions batch them instead:
:class:`pipeline.hearing.vad_batcher.VADBatch` runs the ready windows of any number of
analyzers as ONE call on the process-wide :class:`SileroModel`, and
:class:`pipeline.hearing.vad_batcher.VADBatcher` batches every session of the loop that way
in a worker thread.

Threading (the model itself is :mod:`pipeline.hearing.silero`): an analyzer must be used by
one thread at a time; only ``VADBatch.infer`` is meant to run elsewhere (an executor).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from pipeline.audio.levels import dbfs, level, mean_square
from pipeline.events import (
    AudioIdle,
    Event,
    SpeechFalseStart,
    SpeechOnset,
    SpeechPausing,
    SpeechStarted,
    SpeechStopped,
)
from pipeline.hearing.silero import CONTEXT, SAMPLE_RATE, STATE_SIZE, WINDOW, SileroModel

WINDOW_SECS = WINDOW / SAMPLE_RATE

_INT16_SCALE = np.float32(1.0 / 32768.0)
# Volume scale: 0 at -110 dBFS RMS, 1 at -10 dBFS (see VADParams.min_volume).
_VOLUME_FLOOR_DB = -110.0
_VOLUME_RANGE_DB = 100.0
_SILENCE_DB = -200.0  # what digital silence reads: far below the scale
# The gate reads an envelope of the level: it rises at once, so the gate never delays the
# onset (Pipecat's symmetric 0.2 smoothing costs ~5 windows there), and decays by this
# factor per window, so stop closures inside quiet (-40 dBFS) speech do not close it.
_VOLUME_RELEASE = 0.1
# STARTING survives up to this many windows below `confidence - _START_MARGIN`. Silero's
# probability dips for a few windows after a short first word ("The | quick", "What |
# time"); dropping to QUIET on the first dip, as Pipecat does, moves the onset 100-300 ms
# late. 96 ms is about Silero's own minimum silence between segments (100 ms), and 0.15
# is its own end hysteresis (neg_threshold = threshold - 0.15).
_START_MAX_GAP = 3
_START_MARGIN = 0.15


@dataclass(frozen=True, slots=True)
class VADParams:
    """Thresholds of the speech state machine.

    ``min_volume`` is a loudness gate on top of the model: the window's RMS level mapped
    linearly from -110 dBFS (0.0) to -10 dBFS (1.0), so 0.6 means -50 dBFS. This is the
    scale Pipecat's ``min_volume`` works on (pyloudnorm loudness of int16 samples mapped
    from -20..80), minus K-weighting. Speech at -40..-15 dBFS RMS reads 0.7..0.95 and
    passes; a quiet room (-60 dBFS and below) reads ≤ 0.5 and does not. The gate reads
    an envelope of the level (instant rise, slow decay), so pauses between syllables
    keep it open.
    """

    confidence: float = 0.7
    start_secs: float = 0.2
    stop_secs: float = 0.8
    # Silence after which ``SpeechPausing`` is reported (0 or >= stop_secs: never).
    pause_secs: float = 0.0
    min_volume: float = 0.6
    audio_idle_timeout: float = 1.0  # 0: never end speech for missing audio (reference)

    def __post_init__(self) -> None:
        if not 0.0 <= self.confidence <= 1.0 or not 0.0 <= self.min_volume <= 1.0:
            raise ValueError("confidence and min_volume must be within 0..1")
        if self.start_secs <= 0 or self.stop_secs <= 0:
            raise ValueError("start_secs and stop_secs must be > 0")
        if self.pause_secs < 0:
            raise ValueError("pause_secs must be >= 0 (0: off)")
        if self.audio_idle_timeout < 0:
            raise ValueError("audio_idle_timeout must be >= 0 (0: off)")


class VADState(Enum):
    QUIET = 1
    STARTING = 2
    SPEAKING = 3
    STOPPING = 4


def window_volume(samples: np.ndarray) -> float:
    """Loudness 0..1 of float samples in -1..1 (the ``min_volume`` scale)."""
    db = dbfs(mean_square(samples), floor_db=_SILENCE_DB)
    return level(db, _VOLUME_FLOOR_DB, _VOLUME_FLOOR_DB + _VOLUME_RANGE_DB)


class VADAnalyzer:
    """Speech start/stop detection for one audio stream (one session).

    Owns only per-stream state: the model's recurrent state, the 64-sample context, a
    sample buffer and the state machine. Event times are the speech onset (start of the
    first speech window) and end (end of the last speech window), not the moments of
    decision, which come ``start_secs`` and ``stop_secs`` later.
    """

    def __init__(self, params: VADParams | None = None, model: SileroModel | None = None) -> None:
        self.params = params or VADParams()
        self._model = model or SileroModel.shared()
        self._start_windows = max(1, round(self.params.start_secs / WINDOW_SECS))
        self._stop_windows = max(1, round(self.params.stop_secs / WINDOW_SECS))
        pause = round(self.params.pause_secs / WINDOW_SECS) if self.params.pause_secs else 0
        # A pause window as long as the stop window would report the stop twice.
        self._pause_windows = max(1, pause) if 0 < pause < self._stop_windows else 0
        # buf[0:64] is the context; new samples follow. Room for a window plus a frame.
        self._buf = np.zeros(CONTEXT + 2 * WINDOW, np.float32)
        self._rnn = np.zeros((2, STATE_SIZE), np.float32)
        self.reset()

    @property
    def state(self) -> VADState:
        return self._state

    @property
    def model(self) -> SileroModel:
        return self._model

    @property
    def buffered(self) -> int:
        """Samples fed but not yet analysed (a window is ready at ``WINDOW``)."""
        return self._fill - CONTEXT

    @property
    def recurrent_state(self) -> np.ndarray:
        """The model state ``[2, 128]`` to feed with the next window."""
        return self._rnn

    def reset(self) -> None:
        """Forget all audio and return to QUIET (no events)."""
        self._buf[:CONTEXT] = 0.0
        self._fill = CONTEXT
        self._buf_t = 0.0  # session time of buf[CONTEXT]
        self._rnn[...] = 0.0
        self._in_flight = False
        self._state = VADState.QUIET
        self._run = 0  # speech windows while STARTING, silent ones while STOPPING
        self._volume = 0.0
        self._level = 0.0  # of the window in flight
        self._gap = 0  # windows in a row below the start margin while STARTING
        self._onset = 0.0
        self._speech_end = 0.0
        self._audio_end: float | None = None  # end time of the last pushed frame

    def push(self, frame: bytes, t: float) -> list[Event]:
        """Take one frame (16 kHz mono s16; ``t`` = its start on the session clock) and
        return the events it completes. Runs inference inline as a batch of one."""
        self.feed(frame, t)
        events: list[Event] = []
        while (window := self.take_window()) is not None:
            probs, state = self._model.infer(window[np.newaxis], self._rnn[:, np.newaxis])
            events += self.apply(float(probs[0]), state[:, 0])
        return events

    def feed(self, frame: bytes, t: float) -> None:
        """Buffer a frame without running the model (for
        :class:`~pipeline.hearing.vad_batcher.VADBatch`)."""
        pcm = np.frombuffer(frame, dtype=np.int16)
        end = self._fill + pcm.size
        if end > self._buf.size:  # only for frames longer than a window or a backlog
            grown = np.zeros(2 * end, np.float32)
            grown[: self._fill] = self._buf[: self._fill]
            self._buf = grown
        np.multiply(pcm, _INT16_SCALE, out=self._buf[self._fill : end])
        # Re-anchor on every frame so the buffer's clock follows the sender's.
        self._buf_t = t - (self._fill - CONTEXT) / SAMPLE_RATE
        self._fill = end
        self._audio_end = t + pcm.size / SAMPLE_RATE

    def take_window(self) -> np.ndarray | None:
        """The next model input (576 samples, a view) if one is ready and not already
        taken; marks it in flight until :meth:`apply`. Quiet windows that could not start
        speech whatever the model says are consumed here, without the model."""
        if self._in_flight:
            return None
        while self._fill >= CONTEXT + WINDOW:
            level = window_volume(self._buf[CONTEXT : CONTEXT + WINDOW])
            if not self._cannot_start(level):
                self._in_flight = True
                self._level = level
                return self._buf[: CONTEXT + WINDOW]
            self._advance(0.0, level, self._drop_window())
        return None

    def apply(self, prob: float, state: np.ndarray) -> list[Event]:
        """Consume the window in flight with its probability and new model state
        ``[2, 128]``; advance the state machine and return its events."""
        if not self._in_flight:  # reset() while the window was being inferred
            return []
        self._in_flight = False
        self._rnn[...] = state
        return self._advance(prob, self._level, self._drop_window())

    def _cannot_start(self, level: float) -> bool:
        # In QUIET, a window below the volume gate whose envelope stays below it too
        # cannot be speech at any probability: an open mic in a quiet room (most of a
        # call) costs no inference. The model's recurrent state is left as it was.
        if self._state is not VADState.QUIET:
            return False
        gate = self.params.min_volume
        envelope = self._volume + _VOLUME_RELEASE * (level - self._volume)
        return level < gate and envelope < gate

    def _drop_window(self) -> float:
        """Drop the analysed window (its last 64 samples become the next context);
        returns the window's start time."""
        start = self._buf_t
        keep = self._fill - WINDOW
        self._buf[:keep] = self._buf[WINDOW : self._fill]
        self._fill = keep
        self._buf_t = start + WINDOW_SECS
        return start

    def check_idle(self, t: float) -> list[Event]:
        """If the user was speaking and no audio came for ``audio_idle_timeout``, end the
        speech: return ``SpeechStopped`` (at the end of the audio) then ``AudioIdle(t)``
        and reset to QUIET. The stop comes first so that a consumer which treats
        ``AudioIdle`` as a stop of its own (the turn controller) sees the user silent
        already and ignores it."""
        state, last_audio = self._state, self._audio_end
        if state is VADState.QUIET or last_audio is None or not self.params.audio_idle_timeout:
            return []
        if t - last_audio < self.params.audio_idle_timeout:
            return []
        end = self._speech_end if state is VADState.STOPPING else last_audio
        self.reset()  # also a stale STARTING: its onset is no longer the next speech's
        if state is VADState.STARTING:
            return [SpeechFalseStart(last_audio)]
        return [SpeechStopped(end), AudioIdle(t)]

    def _advance(self, prob: float, level: float, start: float) -> list[Event]:
        """Run the state machine on one window (``start``: its start time)."""
        self._follow_volume(level)
        params = self.params
        if prob >= params.confidence and self._volume >= params.min_volume:
            state = self._on_speech(level, start)
        else:
            state = self._on_silence(prob)
        state, events = self._decide(state, start)
        self._state = state
        return events

    def _follow_volume(self, level: float) -> None:
        """The gate's envelope: instant rise, slow release."""
        if level >= self._volume:
            self._volume = level
        else:
            self._volume += _VOLUME_RELEASE * (level - self._volume)

    def _on_speech(self, level: float, start: float) -> VADState:
        """The state after a speech window (runs and gaps updated)."""
        state = self._state
        # The envelope and Silero both linger after the sound; the end is the last
        # speech window that was loud by itself.
        if level >= self.params.min_volume or state is VADState.QUIET:
            self._speech_end = start + WINDOW_SECS
        if state is VADState.QUIET:
            self._run, self._gap, self._onset = 1, 0, start
            return VADState.STARTING
        if state is VADState.STARTING:
            self._run, self._gap = self._run + 1, 0
        elif state is VADState.STOPPING:
            return VADState.SPEAKING
        return state

    def _on_silence(self, prob: float) -> VADState:
        """The state after a window that is not speech (runs and gaps updated)."""
        state = self._state
        if state is VADState.STARTING:
            if prob >= self.params.confidence - _START_MARGIN:
                self._gap = 0
                return state
            self._gap += 1
            return VADState.QUIET if self._gap > _START_MAX_GAP else state
        if state is VADState.SPEAKING:
            self._run = 1
            return VADState.STOPPING
        if state is VADState.STOPPING:
            self._run += 1
        return state

    def _decide(self, state: VADState, start: float) -> tuple[VADState, list[Event]]:
        """The events of moving from ``self._state`` to ``state``, and where the runs
        take it (a long enough run starts or stops speech)."""
        events: list[Event] = []
        if state is VADState.STARTING and self._state is VADState.QUIET:
            events.append(SpeechOnset(self._onset))
        elif state is VADState.QUIET and self._state is VADState.STARTING:
            events.append(SpeechFalseStart(start + WINDOW_SECS))
        if state is VADState.STARTING and self._run >= self._start_windows:
            state = VADState.SPEAKING
            events.append(SpeechStarted(self._onset))
        elif state is VADState.STOPPING and self._run >= self._stop_windows:
            state = VADState.QUIET
            events.append(SpeechStopped(self._speech_end))
        elif state is VADState.STOPPING and self._run == self._pause_windows:
            events.append(SpeechPausing(self._speech_end))
        return state, events
