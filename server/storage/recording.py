"""One call's recording: both sides as heard, the caller left and the bot right, written
to an Ogg/Opus file (:mod:`server.storage.recording_file`) as the call goes.

The session hands over the caller's 20 ms frames as they arrive and the bot's as the
paced track plays them (silence and a barge-in's cut included: the bot stops in the
recording where it stopped for the caller). Handing over is all the event loop does: a
frame goes into a bounded queue with the time it came (past the bound it is dropped and
counted, never waited for), and one worker thread per recording places the frames on
the call's clock, resamples the bot, encodes and writes.

The two channels are kept in time by that clock: each frame goes where it came, give or
take jitter. A channel that has nothing (the bot before the track plays, a caller whose
audio stopped) is filled with silence up to the clock, less ``LAG_SECONDS`` for frames
still on their way; a frame that comes more than ``GAP_SECONDS`` after the end of its
channel starts after that much silence, and frames closer together are laid end to end,
so a burst after a network stall does not push the channel later and later.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from loguru import logger

from pipeline.audio.resampling import StreamResampler
from server.storage.recording_file import RATE, OpusFile

USER, BOT = 0, 1  # channels: left, right
# Frames waiting for the worker, both channels: 10 s of 20 ms frames.
QUEUE_FRAMES = 1000
# How often the worker wakes to place, encode and write what came meanwhile.
TICK_SECONDS = 0.5
GAP_SECONDS = 0.2
LAG_SECONDS = 0.5
# A channel further ahead of the clock than this (a sender faster than real time) drops
# frames: what waits for the other channel stays bounded.
AHEAD_SECONDS = 2.0
# How long closing waits for the worker to write what it holds.
CLOSE_TIMEOUT = 5.0


@dataclass(slots=True)
class _Lane:
    """One channel: its samples not yet written, and where they end on the call's clock
    (samples since the recording started)."""

    pending: bytearray = field(default_factory=bytearray)
    end: int = 0

    def pad_to(self, at: int) -> None:
        if at > self.end:
            self.pending += bytes(2 * (at - self.end))
            self.end = at

    def take(self, count: int) -> np.ndarray:
        samples = np.frombuffer(bytes(self.pending[: 2 * count]), np.int16)
        del self.pending[: 2 * count]
        return samples


class CallRecording:
    """Records one call to ``path``; ``user`` and ``bot`` are called on the event loop."""

    def __init__(
        self,
        path: Path,
        bot_rate: int = 48000,
        clock: Callable[[], float] = time.monotonic,
        max_queue: int = QUEUE_FRAMES,
    ) -> None:
        self.path = path
        # Frames left out: the queue was full (counted on the loop), a channel far ahead
        # of the clock (counted by the worker); each counter has one writer.
        self._dropped_full = self._dropped_ahead = 0
        self.failed = False  # the file could not be written (logged once)
        self.cpu_seconds = 0.0  # the worker's, once it has finished
        self._clock = clock
        self.started_at = clock()
        # A deque's append and popleft are atomic: no lock taken per frame on the loop.
        self._queue: deque[tuple[int, float, bytes]] = deque()
        self._max_queue = max_queue
        self._lanes = (_Lane(), _Lane())
        self._written = 0
        self._bot_rate = bot_rate
        self._resampler = StreamResampler(RATE)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"recording:{path.stem}")
        self._thread.daemon = True  # a hung disk must not hold the process at exit
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Frames left out of the recording."""
        return self._dropped_full + self._dropped_ahead

    # -- on the event loop ----------------------------------------------------------------

    def user(self, pcm: bytes) -> None:
        """One frame of the caller, 16 kHz mono s16, as it arrived (it began a frame ago)."""
        self._put(USER, self._clock() - len(pcm) / (2 * RATE), pcm)

    def bot(self, pcm: bytes) -> None:
        """One frame of the bot (``bot_rate`` mono s16) as the track plays it, now."""
        self._put(BOT, self._clock(), pcm)

    def _put(self, channel: int, at: float, pcm: bytes) -> None:
        if self.failed or self._stop.is_set():
            return
        if len(self._queue) >= self._max_queue:
            self._dropped_full += 1  # the worker is stuck (a hung disk): the call goes on
        else:
            self._queue.append((channel, at - self.started_at, pcm))

    def stop(self) -> None:
        """The call ended: the worker writes what it holds and closes the file (returns at
        once; idempotent)."""
        self._stop.set()

    async def close(self) -> None:
        """Stop, and wait (up to ``CLOSE_TIMEOUT``) until the file is complete."""
        self.stop()
        await asyncio.to_thread(self._thread.join, CLOSE_TIMEOUT)

    # -- on the worker thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            file = OpusFile(self.path)
        except Exception as exc:
            self._fail("opening", exc)
            return
        try:
            while True:
                # A tick's frames at a time: woken for each frame (an encoder call, a
                # page check and a flush every 20 ms), a recorded call cost 4.9 % of a
                # core more; a tick's at a time, 1.8 % (bench/recording.py, 4 calls).
                stopping = self._stop.wait(TICK_SECONDS)
                self._write(file, self._take(), final=stopping)
                if stopping:
                    break
        except Exception as exc:
            self._fail("writing", exc)
        finally:
            try:
                file.close()
            except Exception as exc:
                self._fail("closing", exc)
            self.cpu_seconds = time.thread_time()
            logger.info(
                "call recording {}: {:.1f} s, {:.3f} s of CPU in its worker, {} frames dropped",
                self.path.name, file.seconds, self.cpu_seconds, self.dropped,
            )  # fmt: skip

    def _fail(self, what: str, exc: Exception) -> None:
        self.failed = True
        logger.opt(exception=exc).error("call recording {}: {} failed", self.path.name, what)

    def _take(self) -> int:
        """Place every frame waiting; the clock (samples) at which every frame handed
        over before is placed."""
        # Read before draining: every frame stamped earlier is in the queue by now, so
        # filling up to this clock (less the lag) never runs past a frame not yet placed.
        now = self._now()
        waiting = self._queue
        items = [waiting.popleft() for _ in range(len(waiting))]
        bot = self._bot_samples([pcm for channel, _, pcm in items if channel == BOT])
        for channel, at, pcm in items:
            if channel == BOT:
                self._place(BOT, at, next(bot), now)
            else:
                self._place(USER, at, np.frombuffer(pcm, np.int16), now)
        return now

    def _bot_samples(self, frames: list[bytes]) -> Iterator[np.ndarray]:
        """The bot's frames at the recording's rate, in order. Resampled together, a
        tick's worth at once: frame by frame, the calls cost more than the filtering
        (0.17 s of CPU a minute; libswresample on a tick's frames, 0.03 s)."""
        if self._bot_rate == RATE or not frames:
            return (np.frombuffer(pcm, np.int16) for pcm in frames)
        joined = b"".join(frames)
        out = np.frombuffer(self._resampler.resample(joined, self._bot_rate), np.int16)
        # Shared out by length (the resampler holds a few samples back: they come with
        # the next tick's).
        ends = np.cumsum([len(pcm) for pcm in frames]) * len(out) // len(joined)
        return iter(np.split(out, ends[:-1]))

    def _place(self, channel: int, at: float, samples: np.ndarray, now: int) -> None:
        lane = self._lanes[channel]
        start = round(at * RATE)
        if lane.end > now + AHEAD_SECONDS * RATE:
            self._dropped_ahead += 1
            return
        if start > lane.end + GAP_SECONDS * RATE:
            lane.pad_to(start)
        lane.pending += samples.tobytes()
        lane.end += len(samples)

    def _now(self) -> int:
        """The call's clock, in samples since the recording started."""
        return round((self._clock() - self.started_at) * RATE)

    def _write(self, file: OpusFile, now: int, final: bool) -> None:
        """Write what both channels have; a silent channel is filled up to the clock
        ``now`` (at the end: everything, both channels to the longer)."""
        if final:
            target = max(now, *(lane.end for lane in self._lanes))
        else:
            target = now - round(LAG_SECONDS * RATE)
        for lane in self._lanes:
            lane.pad_to(target)
        count = min(lane.end for lane in self._lanes) - self._written
        if count <= 0:
            return
        stereo = np.empty(2 * count, np.int16)
        stereo[USER::2] = self._lanes[USER].take(count)
        stereo[BOT::2] = self._lanes[BOT].take(count)
        self._written += count
        file.write(stereo)
