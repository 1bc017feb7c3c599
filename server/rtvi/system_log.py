"""RTVI ``system-log``: a session's log lines, forwarded to its client (opt-in).

A session binds ``session=<pc_id>`` into loguru's context around the work it starts
(its tasks, the messages it serves), so every line logged on its behalf carries it. A
forwarder is one loguru sink that takes the lines with its session's key at or above a
level and sends each as a ``system-log`` message. Log lines can hold private data
(transcripts, tool arguments): that is why forwarding is off by default.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from loguru import logger

from server.rtvi.server_messages import TextData, build

SESSION_KEY = "session"


@contextlib.contextmanager
def session_context(pc_id: str) -> Iterator[None]:
    """Mark log lines (and tasks started inside) as ``pc_id``'s."""
    with logger.contextualize(**{SESSION_KEY: pc_id}):
        yield


class SystemLogForwarder:
    """Sends the log lines of one session to its client; :meth:`close` stops it."""

    def __init__(self, pc_id: str, send: Callable[[dict[str, Any]], None], level: str) -> None:
        self._send = send
        self._loop = asyncio.get_running_loop()
        self._sending = False
        self._handler: int | None = logger.add(
            self._sink,
            level=level,
            format="{message}",
            filter=lambda record: record["extra"].get(SESSION_KEY) == pc_id,
            catch=True,
            diagnose=False,  # no variable values in tracebacks (server/ops/logs.py)
        )

    def _sink(self, message: Any) -> None:
        if self._sending:
            return  # a line logged while sending one (a failed send): never loop
        record = message.record
        text = f"{record['level'].name} {record['name']}: {record['message']}"
        # Sinks may run on any thread, and inside another sink's send: deliver later,
        # on the loop.
        self._loop.call_soon_threadsafe(self._deliver, text)

    def _deliver(self, text: str) -> None:
        if self._handler is None:
            return
        self._sending = True
        try:
            self._send(build("system-log", TextData(text=text)))
        finally:
            self._sending = False

    def close(self) -> None:
        if self._handler is not None:
            logger.remove(self._handler)
            self._handler = None
