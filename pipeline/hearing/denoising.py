"""Noise suppression for every session of an event loop, in a worker thread.

RNNoise costs about 3.3 ms per 20 ms frame (:mod:`pipeline.audio.noise_suppression`): on
the loop, a few calls would delay everything else. So each session's
:class:`~pipeline.hearing.inbound.Hearing` hands its frame to :meth:`Denoising.submit`
(cheap: an append) and goes on; the first frame to arrive while the worker is idle starts
a drain task, which takes every frame pending at that moment, denoises them as one job in
one worker thread (the library releases the GIL, so the loop runs meanwhile) and hands
each back, in order, to its session's sink on the loop. Frames that arrive meanwhile go
in the next job. Per stream the order is kept: one job at a time, frames in arrival order.

One worker denoises about 280 frames a second on this project's cores: five or six calls.
Past that the backlog would grow without end, so a frame that waited longer than
:data:`MAX_WAIT` goes on as it came (counted in :attr:`Denoising.passed`, with a warning
at most once a minute): under overload the VAD hears noisy audio, not late audio.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar

from loguru import logger

from pipeline.audio.noise_suppression import NoiseSuppressor

# (frame, its time on the session clock): the sink gets the frame denoised, or as it came.
FrameSink = Callable[[bytes, float], None]

MAX_WAIT = 0.2  # seconds a frame may wait for the worker before it passes undenoised
_WARN_EVERY = 60.0


@dataclass(slots=True)
class _Frame:
    suppressor: NoiseSuppressor
    pcm: bytes
    t: float
    sink: FrameSink
    queued: float  # time.monotonic() at submit


class Denoising:
    """Every session's frames of one event loop, denoised in one worker thread. Use
    :meth:`for_loop`; call its methods on that loop."""

    _executor: ClassVar[ThreadPoolExecutor | None] = None
    _by_loop: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Denoising]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pending: list[_Frame] = []
        self._busy: set[NoiseSuppressor] = set()  # in the job that is running
        self._closing: set[NoiseSuppressor] = set()  # released while busy
        self._drain: asyncio.Task[None] | None = None
        self._warned = -_WARN_EVERY
        self.frames = 0
        self.passed = 0  # frames that went on undenoised: overload, or a failed job

    @classmethod
    def for_loop(cls) -> Denoising:
        """The running loop's (created on first use)."""
        loop = asyncio.get_running_loop()
        denoising = cls._by_loop.get(loop)
        if denoising is None:
            denoising = cls._by_loop[loop] = cls(loop)
        return denoising

    @classmethod
    def _worker(cls) -> ThreadPoolExecutor:
        if cls._executor is None:
            cls._executor = ThreadPoolExecutor(1, thread_name_prefix="denoise")
        return cls._executor

    def submit(self, suppressor: NoiseSuppressor, pcm: bytes, t: float, sink: FrameSink) -> None:
        """Denoise ``pcm`` with ``suppressor``; ``sink(frame, t)`` gets it on the loop."""
        self._pending.append(_Frame(suppressor, pcm, t, sink, time.monotonic()))
        if self._drain is None:
            self._drain = self._loop.create_task(self._run(), name="denoise")

    def release(self, suppressor: NoiseSuppressor) -> None:
        """The stream is done: drop its pending frames and free its suppressor (after the
        running job, if that job has its frames)."""
        self._pending = [f for f in self._pending if f.suppressor is not suppressor]
        if suppressor in self._busy:
            self._closing.add(suppressor)
        else:
            suppressor.close()

    async def _run(self) -> None:
        try:
            while self._pending:
                job, self._pending = self._pending, []
                self._busy = {f.suppressor for f in job}
                try:
                    out = await self._loop.run_in_executor(self._worker(), _denoise, job)
                except Exception:  # the frames go on as they came, not nowhere
                    logger.exception("noise suppression failed for {} frames", len(job))
                    out = [f.pcm for f in job]
                    self.passed += len(job)
                finally:
                    self._free()
                self._deliver(job, out)
        finally:
            self._drain = None

    def _free(self) -> None:
        for suppressor in self._closing:
            suppressor.close()
        self._closing.clear()
        self._busy = set()

    def _deliver(self, job: list[_Frame], out: list[bytes | None]) -> None:
        late = 0
        for frame, pcm in zip(job, out, strict=True):
            if pcm is None:
                late += 1
                pcm = frame.pcm
            try:
                frame.sink(pcm, frame.t)
            except Exception:  # one session's failure must not cost the others their audio
                logger.exception("a denoised-audio sink failed")
        self.frames += len(job)
        self.passed += late
        now = time.monotonic()
        if late and now - self._warned >= _WARN_EVERY:
            self._warned = now
            logger.warning(
                "noise suppression is behind: {} frames passed undenoised ({} so far); "
                "too many calls for PARLEY_NOISE_SUPPRESSION on these cores",
                late,
                self.passed,
            )


def _denoise(job: list[_Frame]) -> list[bytes | None]:
    """In the worker: each frame denoised, in order; None for a frame that waited too long
    (skipped: catching up is the point; its stream's next denoised frames may repeat or
    miss a few milliseconds, which the VAD does not mind)."""
    out: list[bytes | None] = []
    for frame in job:
        if time.monotonic() - frame.queued > MAX_WAIT:
            out.append(None)
        else:
            out.append(frame.suppressor.process(frame.pcm))
    return out
