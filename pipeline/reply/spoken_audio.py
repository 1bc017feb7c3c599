"""A speech-to-speech model's answer to the output: its audio as it comes, each piece
tagged with the words of its transcript that arrived before it.

There is no TTS to tag audio by sentence, so the transcript's deltas ride on the next
audio written, whole words only (a word cut between two deltas waits for its end): the
output then reports as spoken the words whose audio went out, as for the cascade.
:meth:`heard` is how much of the answer's audio the user heard: what was written less
what is still unplayed (20 ms marks, so a cut is placed to within a frame).
"""

from __future__ import annotations

import numpy as np

from pipeline.reply.playout_pacing import AudioOutput, PlayoutPacer

SLICE_SECONDS = 0.02  # marks per 20 ms frame: where a cut fell, to a frame


class SpokenAudio:
    """Writes one answer's audio with its words; counts what was written and heard."""

    def __init__(self, output: AudioOutput) -> None:
        # No limit ahead (a realtime model sends its audio faster than it plays, and
        # generates it whether or not it is read), fine marks for :meth:`heard`.
        self._pacer = PlayoutPacer(output, ahead=float("inf"), slice_seconds=SLICE_SECONDS)
        self._words = ""  # transcript not yet written with audio
        self._rate = 24000
        self.written = 0.0  # seconds of audio written
        self.started = False

    def text(self, delta: str) -> None:
        self._words += delta

    def audio(self, pcm: bytes, sample_rate: int) -> None:
        self._rate = sample_rate
        cut = self._words.rfind(" ")
        words, self._words = self._words[: cut + 1], self._words[cut + 1 :]
        self._write(np.frombuffer(pcm, dtype=np.int16), sample_rate, words.strip())
        self.started = True

    def finish(self) -> None:
        """The answer's last words (no audio followed them) ride on a frame of silence."""
        words, self._words = self._words.strip(), ""
        if words and self.started:
            self._write(np.zeros(self._rate // 50, np.int16), self._rate, words)

    def heard(self) -> float:
        return max(0.0, self.written - self._pacer.unplayed)

    def _write(self, samples: np.ndarray, rate: int, words: str) -> None:
        if samples.size:
            self._pacer.write(samples, rate, words or None)
            self.written += samples.size / rate
