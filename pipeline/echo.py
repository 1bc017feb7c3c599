"""A stand-in audio path until the conversation pipeline is wired in.

It plays back each utterance it hears once the user has been quiet for a moment, so
the whole media loop (Opus in, resampling, paced Opus out) can be heard and tested.
Speech is detected by frame energy alone; the real pipeline uses Silero VAD.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

SAMPLE_RATE = 16000
FRAME_SECONDS = 0.02


class AudioOutput(Protocol):
    """Where the pipeline's audio goes (the outbound track)."""

    def write(self, pcm: bytes | np.ndarray, sample_rate: int) -> None: ...

    def flush(self) -> None: ...


class EchoPipeline:
    """Collects speech frames and writes them to the output after trailing silence."""

    def __init__(
        self,
        output: AudioOutput,
        threshold_rms: float = 300.0,
        silence_secs: float = 0.6,
        max_utterance_secs: float = 10.0,
    ) -> None:
        self._output = output
        self._threshold_sq = threshold_rms * threshold_rms
        self._silence_frames = round(silence_secs / FRAME_SECONDS)
        self._max_bytes = int(max_utterance_secs * SAMPLE_RATE) * 2
        self._utterance = bytearray()
        self._quiet = 0
        self.utterances = 0

    def push_audio(self, frame: bytes) -> None:
        """Take one 20 ms, 16 kHz mono s16 frame."""
        samples = np.frombuffer(frame, dtype=np.int16).astype(np.float32)
        loud = float(np.dot(samples, samples)) / max(samples.size, 1) > self._threshold_sq
        if loud:
            self._quiet = 0
            self._utterance += frame
        elif self._utterance:
            self._quiet += 1
            self._utterance += frame
            if self._quiet >= self._silence_frames:
                self._play()
        if len(self._utterance) >= self._max_bytes:
            self._play()

    def _play(self) -> None:
        self._output.write(bytes(self._utterance), SAMPLE_RATE)
        self._utterance.clear()
        self._quiet = 0
        self.utterances += 1

    def interrupt(self) -> None:
        """Stop any playback at once."""
        self._output.flush()
