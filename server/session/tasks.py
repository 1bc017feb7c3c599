"""The tasks one session owns: started in its logging context, reported when they fail,
cancelled and awaited when it closes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from pipeline.task_cancel import cancel_and_wait
from server.rtvi.system_log import session_context


class SessionTasks:
    """Owns a session's tasks; ``on_failed(task, exc)`` hears of each that raised."""

    def __init__(
        self, pc_id: str, on_failed: Callable[[asyncio.Task[Any], BaseException], None]
    ) -> None:
        self.pc_id = pc_id
        self._on_failed = on_failed
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a task named ``<pc_id[:8]>:<name>`` (its log lines are the
        session's)."""
        with session_context(self.pc_id):
            task = asyncio.create_task(coro, name=f"{self.pc_id[:8]}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            self._on_failed(task, exc)

    async def end(self) -> None:
        """Cancel every task still running and wait for them."""
        await cancel_and_wait(self._tasks)
