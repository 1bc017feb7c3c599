"""Faults of one session's own handlers: logged with the session id, counted, survived.

aiortc runs our code inside its transport loops: the inbound audio path (decoder, VAD,
turn logic, transcriber, level meter, recorder) inside the DTLS receive loop, the data
channel's callbacks inside SCTP's, playout listeners inside the RTP sender's. An
exception there ends that loop, and with it the call (or its audio). So every such entry
point catches what our handlers raise and reports it here instead: the handler loses
the frame, event or message it was handling, and the call goes on.

A handler that fails on every 20 ms frame would fail 50 times a second: each fault is
counted (``count``, and ``listeners``, which feed ``parley_errors_total{kind="handler"}``),
but a place logs at most once per ``LOG_INTERVAL``, saying how many it did not log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger

from server.rtvi.system_log import SESSION_KEY

LOG_INTERVAL = 10.0


@dataclass
class _Place:
    logged_at: float
    unlogged: int = 0


class SessionFaults:
    """Reports of the faults in one session's handlers, by place (a short fixed name)."""

    def __init__(self, pc_id: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.pc_id = pc_id
        self.count = 0
        # Told the place of every fault (metrics count them).
        self.listeners: list[Callable[[str], None]] = []
        self._clock = clock
        self._places: dict[str, _Place] = {}

    def report(self, where: str, exc: BaseException) -> None:
        """``where``'s handler raised ``exc``; the caller goes on without its result."""
        self.count += 1
        for listener in self.listeners:
            try:
                listener(where)
            except Exception as fault:  # never raise back into the path being protected
                self._log_now_and_then("a fault listener", fault)
        self._log_now_and_then(where, exc)

    def _log_now_and_then(self, where: str, exc: BaseException) -> None:
        now = self._clock()
        place = self._places.get(where)
        if place is not None and now - place.logged_at < LOG_INTERVAL:
            place.unlogged += 1
            return
        unlogged = place.unlogged if place is not None else 0
        self._places[where] = _Place(now)
        since = f" ({unlogged} more since the last report)" if unlogged else ""
        logger.bind(**{SESSION_KEY: self.pc_id}).opt(exception=exc).error(
            "session {}: {} failed{}; the call goes on: {!r}", self.pc_id, where, since, exc
        )
