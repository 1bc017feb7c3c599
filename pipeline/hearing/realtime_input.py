"""The caller's speech to a speech-to-speech model, cut where Parley's VAD cuts it.

Stands where the transcriber stands (:class:`~pipeline.hearing.inbound.Hearing` feeds it
the same frames and the same VAD events) and passes everything on to it: the local STT
still gives the turn logic its words. Each utterance (from its onset, less the same
pre-roll the transcriber keeps) goes to the model as 24 kHz PCM in 100 ms appends while
it is spoken, and is committed at its end: one user audio item per utterance, which the
model hears as audio. (With the provider's own VAD taking turns, all the audio streams to
it and it commits by itself.) Speech that then makes no turn is taken back by the session
(:meth:`~pipeline.realtime.service.RealtimeLLM.discard`).
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from pipeline.audio.resampling import StreamResampler
from pipeline.events import AudioIdle, Event, SpeechStarted, SpeechStopped

PRE_ROLL = 0.3  # seconds before the VAD's onset (the transcriber's default)
RING = 0.6  # seconds kept while nobody speaks: the confirmation delay plus the pre-roll
APPEND_SECONDS = 0.1
MAX_UTTERANCE = 30.0  # seconds in one item; a longer monologue is committed in parts
FRAME_SECONDS = 0.02


class Recorder(Protocol):
    """What hearing feeds the transcriber (and this, in its place)."""

    def push_audio(self, frame: bytes, t: float) -> None: ...

    def handle(self, event: Event) -> None: ...


class SpeechModelInput(Protocol):
    """The model's side: its audio rate, the audio as it comes, each utterance's end;
    ``continuous``: it takes all the audio and finds the turns itself (its own VAD)."""

    input_rate: int
    continuous: bool

    def append_audio(self, pcm: bytes) -> None: ...

    def commit(self, onset: float) -> None: ...


class RealtimeInput:
    """Tees hearing's frames and events: to ``transcriber`` and, per utterance, to
    ``model``."""

    def __init__(self, transcriber: Recorder, model: SpeechModelInput) -> None:
        self.transcriber = transcriber
        self.model = model
        self._ring: deque[tuple[float, bytes]] = deque(maxlen=round(RING / FRAME_SECONDS))
        self._resampler = StreamResampler(model.input_rate)
        self._pending: list[bytes] = []
        self._onset: float | None = None  # of the utterance being sent
        self._sent = 0.0  # seconds of it

    def push_audio(self, frame: bytes, t: float) -> None:
        self.transcriber.push_audio(frame, t)
        if self._onset is None and not self.model.continuous:
            self._ring.append((t, frame))
            return
        self._pending.append(frame)
        if len(self._pending) * FRAME_SECONDS >= APPEND_SECONDS - 1e-9:
            self._flush()
        if self._onset is not None and self._sent >= MAX_UTTERANCE:
            self.model.commit(self._onset)
            self._onset, self._sent = self._onset + self._sent, 0.0

    def handle(self, event: Event) -> None:
        self.transcriber.handle(event)
        if self.model.continuous:
            return
        if isinstance(event, SpeechStarted) and self._onset is None:
            self._onset = event.t
            self._sent = 0.0
            self._pending = [f for t, f in self._ring if t >= event.t - PRE_ROLL]
            self._ring.clear()
            self._flush()
        elif isinstance(event, SpeechStopped | AudioIdle) and self._onset is not None:
            self._flush()
            self.model.commit(self._onset)
            self._onset = None
            self._resampler.reset()

    def _flush(self) -> None:
        if not self._pending:
            return
        pcm = b"".join(self._pending)
        self._pending = []
        self._sent += len(pcm) / 32000
        self.model.append_audio(self._resampler.resample(pcm, 16000))
