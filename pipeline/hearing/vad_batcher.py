"""Silero VAD for every session of an event loop: batched, and off the loop.

Each session feeds its :class:`~pipeline.hearing.vad.VADAnalyzer` on the loop (cheap: a copy into
its buffer) and calls :meth:`VADBatcher.submit`. The first window to arrive while the
batcher is idle starts a drain task; that task's first step runs on the loop's next
iteration, so it takes every window pending at that moment (the frames of other peers
that arrived in the same iteration) and scores them as ONE :class:`VADBatch`
call in a worker thread (onnxruntime releases the GIL, so the loop runs meanwhile).
Windows that arrive during an inference wait for the next one, which starts as soon as
the current one is applied. There is no fixed tick: an idle batcher adds no delay, and a
busy one at most one inference (~1 ms for 20 windows).

Per session, windows are scored in order (an analyzer has at most one window in flight
and its model state goes back before the next is staged) and its events are delivered
in order, on the loop, to the callback it registered. Results are the same as inline
inference: rows of a batch are independent (see :meth:`SileroModel.infer`).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

import numpy as np
from loguru import logger

from pipeline.events import Event
from pipeline.hearing.silero import CONTEXT, STATE_SIZE, WINDOW, SileroModel
from pipeline.hearing.vad import VADAnalyzer

EventSink = Callable[[list[Event]], None]


class VADBatch:
    """One inference call for the ready windows of many analyzers.

    Every 32 ms each analyzer fed with 20 ms frames has (at most) one window ready.
    :meth:`run` stages all ready windows, infers them together, applies the results and
    repeats while any analyzer still has a window (a backlog after a burst of frames).

    To keep inference off the event loop, split it: :meth:`stage` and :meth:`finish` on
    the loop (they touch the analyzers), :meth:`infer` in an executor (it touches only
    this batch's buffers and the read-only model). Analyzers may be fed meanwhile; a
    window in flight is not staged again. Use one ``VADBatch`` per concurrent caller.
    """

    def __init__(self, model: SileroModel | None = None) -> None:
        self._model = model or SileroModel.shared()
        self._scratch: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._requested = 0
        self._staged: list[tuple[int, VADAnalyzer]] = []
        self._probs: np.ndarray | None = None
        self._new_state: np.ndarray | None = None

    def run(self, analyzers: Sequence[VADAnalyzer]) -> list[list[Event]]:
        """Process every ready window; events per analyzer, in the order given."""
        results: list[list[Event]] = [[] for _ in analyzers]
        while self.stage(analyzers):
            self.infer()
            for events, new in zip(results, self.finish(), strict=True):
                if new:
                    events.extend(new)
        return results

    def stage(self, analyzers: Sequence[VADAnalyzer]) -> int:
        """Copy the ready windows and states in; returns how many were staged."""
        if self._staged:
            raise RuntimeError("finish() the staged batch before staging another")
        if any(analyzer.model is not self._model for analyzer in analyzers):
            raise ValueError("all analyzers in a batch must share the batch's model")
        self._requested = len(analyzers)
        windows = []
        for index, analyzer in enumerate(analyzers):
            window = analyzer.take_window()
            if window is not None:
                self._staged.append((index, analyzer))
                windows.append(window)
        count = len(windows)
        if count:
            inputs, states = self._buffers(count)
            for row, ((_, analyzer), window) in enumerate(zip(self._staged, windows, strict=True)):
                inputs[row] = window
                states[:, row] = analyzer.recurrent_state
        return count

    def infer(self) -> None:
        """Run the staged batch (thread-safe with respect to the analyzers)."""
        count = len(self._staged)
        if count:
            inputs, states = self._scratch[count]
            self._probs, self._new_state = self._model.infer(inputs, states)

    def finish(self) -> list[list[Event]]:
        """Apply the results; events per analyzer passed to :meth:`stage`, in order."""
        results: list[list[Event]] = [[] for _ in range(self._requested)]
        if not self._staged:
            return results
        probs, new_state = self._probs, self._new_state
        if probs is None or new_state is None:
            raise RuntimeError("infer() the staged batch before finishing it")
        for row, (index, analyzer) in enumerate(self._staged):
            results[index] = analyzer.apply(float(probs[row]), new_state[:, row])
        self._staged.clear()
        self._probs = self._new_state = None
        return results

    def fail(self) -> list[list[Event]]:
        """Drop the staged batch unscored (its inference failed or was cancelled): each
        window counts as silence and its analyzer keeps its model state."""
        results: list[list[Event]] = [[] for _ in range(self._requested)]
        for index, analyzer in self._staged:
            results[index] = analyzer.apply(0.0, analyzer.recurrent_state.copy())
        self._staged.clear()
        self._probs = self._new_state = None
        return results

    def _buffers(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        # onnxruntime wants contiguous inputs, so keep one exact-size pair per batch size.
        pair = self._scratch.get(count)
        if pair is None:
            pair = (
                np.zeros((count, CONTEXT + WINDOW), np.float32),
                np.zeros((2, count, STATE_SIZE), np.float32),
            )
            self._scratch[count] = pair
        return pair


class VADBatcher:
    """Collects the ready windows of many analyzers; one inference at a time, in a thread.

    Use :meth:`for_loop` to get the batcher shared by the running loop's sessions. All
    methods are called on that loop.
    """

    # One worker for every batcher: a batch is one call, and the box has few cores.
    _executor: ClassVar[ThreadPoolExecutor | None] = None
    _by_loop: ClassVar[
        weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[SileroModel, VADBatcher]]
    ] = weakref.WeakKeyDictionary()

    def __init__(self, model: SileroModel, loop: asyncio.AbstractEventLoop) -> None:
        self.model = model
        self._loop = loop
        self._batch = VADBatch(model)
        self._sinks: dict[VADAnalyzer, EventSink] = {}
        self._pending: dict[VADAnalyzer, None] = {}  # an ordered set
        self._drain: asyncio.Task[None] | None = None
        self.inferences = 0
        self.windows = 0

    @classmethod
    def for_loop(cls, model: SileroModel) -> VADBatcher:
        """The batcher of ``model`` for the running event loop (created on first use)."""
        loop = asyncio.get_running_loop()
        batchers = cls._by_loop.setdefault(loop, {})
        batcher = batchers.get(model)
        if batcher is None:
            batcher = batchers[model] = cls(model, loop)
        return batcher

    @classmethod
    def _worker(cls) -> ThreadPoolExecutor:
        if cls._executor is None:
            cls._executor = ThreadPoolExecutor(1, thread_name_prefix="silero-vad")
        return cls._executor

    @property
    def busy(self) -> bool:
        """Windows are pending or being scored."""
        return self._drain is not None

    def register(self, analyzer: VADAnalyzer, sink: EventSink) -> None:
        """Deliver ``analyzer``'s events to ``sink`` (on the loop, in order)."""
        if analyzer.model is not self.model:
            raise ValueError("the analyzer must use the batcher's model")
        self._sinks[analyzer] = sink

    def unregister(self, analyzer: VADAnalyzer) -> None:
        """Stop delivering; a window of it in flight is still applied, silently."""
        self._sinks.pop(analyzer, None)
        self._pending.pop(analyzer, None)

    def submit(self, analyzer: VADAnalyzer) -> None:
        """Call after :meth:`VADAnalyzer.feed`: schedule its window if one is ready."""
        if analyzer.buffered < WINDOW or analyzer not in self._sinks:
            return
        self._pending[analyzer] = None
        if self._drain is None:
            self._drain = self._loop.create_task(self._run(), name="vad-batch")

    async def _run(self) -> None:
        try:
            while self._pending:
                analyzers = list(self._pending)
                self._pending.clear()
                results = await self._infer(analyzers)
                for analyzer, events in zip(analyzers, results, strict=True):
                    if analyzer.buffered >= WINDOW and analyzer in self._sinks:
                        self._pending[analyzer] = None  # a backlog: its next window
                    if events:
                        self._deliver(analyzer, events)
        finally:
            self._drain = None

    async def _infer(self, analyzers: list[VADAnalyzer]) -> list[list[Event]]:
        """Stage on the loop, infer in the worker, apply on the loop."""
        staged = self._batch.stage(analyzers)  # quiet windows are consumed here, no model
        if not staged:
            return self._batch.finish()
        try:
            await self._loop.run_in_executor(self._worker(), self._batch.infer)
        except asyncio.CancelledError:
            self._batch.fail()  # the loop is going away; leave the analyzers usable
            raise
        except Exception:
            # The windows count as silence rather than the VAD of every session stopping.
            logger.exception("VAD inference failed for {} windows", staged)
            return self._batch.fail()
        self.inferences += 1
        self.windows += staged
        return self._batch.finish()

    def _deliver(self, analyzer: VADAnalyzer, events: list[Event]) -> None:
        sink = self._sinks.get(analyzer)
        if sink is None:
            return
        try:
            sink(events)
        except Exception:  # one session's failure must not cost the others their events
            logger.exception("a VAD event handler failed")
