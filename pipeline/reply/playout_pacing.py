"""Back-pressure from playout to TTS: a bot turn synthesizes at most a few seconds ahead of
what has been played.

Without it every sentence is synthesized as fast as the TTS allows into the output's
unbounded queue: a long answer buffers minutes of audio per session (about 96 kB per
second at 48 kHz), and a barge-in throws all that synthesis, and its cost, away.

:class:`PlayoutPacer` stands between a bot turn and its output. It writes the audio in
short slices, each followed by a ``mark`` (the output calls it once everything written
before it has been sent), and counts the seconds written whose marks have not fired:
written but not yet played. Before each sentence the turn awaits :meth:`room`, which
returns once at most ``ahead`` seconds are unplayed; so at most ``ahead`` plus one
sentence is ever queued, and a barge-in wastes no more than that.

Marks are all the output offers, and they fit every state it can be in:

- paused (a barge-in being judged): nothing is sent, no mark fires, synthesis stops at
  the limit and goes on when playout resumes;
- held (a preemptive reply): :class:`~pipeline.reply.preemptive.HeldOutput` keeps the marks
  until its release, so held audio counts as ahead; a held reply synthesizes up to the
  limit, waits, and goes on once released;
- flushed (a barge-in): the flush drops the marks and the turn is cancelled with it, and
  the wait ends with the task (the turn's own playout wait relies on the same).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Protocol

import numpy as np

# Default for PARLEY_TTS_AHEAD_SECONDS. Enough to cover a TTS's time to first audio
# (hundreds of ms for a cloud voice, more when a shared pool is queued) many times over,
# so playout never runs dry between sentences; small enough that a barge-in wastes
# little synthesis and a session buffers a few hundred kB at most.
DEFAULT_TTS_AHEAD = 3.0
# The grain of the back-pressure: a sentence's audio goes out in slices this long, each
# marked, so the next sentence starts once the unplayed audio is down to the limit, not
# only after a whole (maybe long) sentence has played.
SLICE_SECONDS = 0.2
_EPSILON = 1e-6  # float sums of slice lengths


class AudioOutput(Protocol):
    """The outbound track, as the pipeline sees it."""

    @property
    def playing(self) -> bool:
        """Audio is going out right now."""
        ...

    def write(self, pcm: bytes | np.ndarray, sample_rate: int, text: str | None = None) -> None: ...

    def mark(self, callback: Callable[[], None]) -> None: ...

    def flush(self) -> None: ...


class PlayoutPacer:
    """Writes a turn's audio to ``output`` and tracks how much of it is unplayed.

    ``ahead`` is the most seconds synthesized ahead of playout; 0 means no limit (audio
    is written as it comes, unmarked)."""

    def __init__(
        self,
        output: AudioOutput,
        ahead: float = DEFAULT_TTS_AHEAD,
        slice_seconds: float = SLICE_SECONDS,
    ) -> None:
        self.output = output
        self.ahead = ahead
        self.slice_seconds = slice_seconds
        self.unplayed = 0.0  # seconds written whose marks have not fired
        self._played = asyncio.Event()

    def write(self, pcm: bytes | np.ndarray, sample_rate: int, text: str | None = None) -> None:
        """Write ``pcm`` (mono int16 at ``sample_rate``); ``text`` rides on its first slice."""
        if not self.ahead:
            self.output.write(pcm, sample_rate, text)
            return
        samples = pcm if isinstance(pcm, np.ndarray) else np.frombuffer(pcm, dtype=np.int16)
        step = max(1, round(self.slice_seconds * sample_rate))
        for start in range(0, samples.size, step):
            piece = samples[start : start + step]
            self.output.write(piece, sample_rate, text if start == 0 else None)
            seconds = piece.size / sample_rate
            self.unplayed += seconds
            self.output.mark(partial(self._on_played, seconds))

    async def room(self) -> None:
        """Return once at most ``ahead`` seconds written are unplayed (at once: no limit)."""
        while self.ahead and self.unplayed > self.ahead + _EPSILON:
            self._played.clear()
            await self._played.wait()

    def _on_played(self, seconds: float) -> None:
        self.unplayed -= seconds
        self._played.set()
