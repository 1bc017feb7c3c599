"""One session's record, written to the transcript store as its conversation goes.

The recorder observes the conversation's events (as the RTVI observer does) and writes
each turn the moment it completes, so a crash loses at most the turn in flight. Store
writes return at once, so the handlers stay quick.

Client messages the server rejected (RTVI errors) are not an event each: a client can
send a bad message 20 times a second (the allowed rate), and each write is a commit on
disk. They are counted by reason and written as one ``rejected-messages`` event at most
every ``REJECTED_FLUSH_SECONDS``, and at the end.

What one call may write is bounded (``max_bytes`` of text and event data, ``max_entries``
turns and events; ``PARLEY_MAX_RECORD_*``): a client typing 4 KB twenty times a second,
or a tool returning megabytes, must not grow the database without end. Past the budget,
turns and events are counted, not written; the record says so with one
``record-truncated`` event at the first one left out and one ``record-skipped`` event
(how many turns, events and bytes) at the end. The end itself is always written.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pipeline.conversation import Conversation
from pipeline.events import (
    AssistantTranscript,
    FunctionCallCancelled,
    FunctionCallInProgress,
    FunctionCallResult,
    Interruption,
    Metric,
    ServiceError,
    UserSpeechDiscarded,
    UserTranscript,
    UserTurnMerged,
)
from pipeline.session_metrics import SessionMetrics
from server.storage.store import ClientInfo, TranscriptStore

REJECTED_FLUSH_SECONDS = 5.0
# Reasons counted in one flush, "other" (all the rest) included: reasons are short fixed
# texts, but a few name what the client sent.
MAX_REJECTED_REASONS = 16
MAX_REASON_CHARS = 100
# What one call may write by default (the settings' defaults).
MAX_RECORD_BYTES = 1_048_576
MAX_RECORD_ENTRIES = 5000
# Counted per turn or event on top of its text or data: the row, its indexes, the
# usage and figures a turn carries.
ENTRY_OVERHEAD = 256


class SessionRecorder:
    """Writes one session's turns, events, usage and end to ``store``."""

    def __init__(
        self,
        store: TranscriptStore,
        session_id: str,
        start_id: str | None,
        client: ClientInfo,
        clock: Callable[[], float] = time.time,
        rejected_flush_seconds: float = REJECTED_FLUSH_SECONDS,
        max_bytes: int = MAX_RECORD_BYTES,
        max_entries: int = MAX_RECORD_ENTRIES,
    ) -> None:
        self.store = store
        self.session_id = session_id
        self._clock = clock
        self._totals = SessionMetrics()
        self._answer = SessionMetrics()  # the figures of the answer being given
        self._closed = False
        self._rejected: dict[str, int] = {}
        self._rejected_example: dict[str, str] = {}
        self._rejected_since = 0.0
        self._flush_seconds = rejected_flush_seconds
        self._flush_timer: asyncio.TimerHandle | None = None
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.written_bytes = self.written_entries = 0
        self.skipped = {"turns": 0, "events": 0, "bytes": 0}
        store.open_session(session_id, start_id, vars(client).copy(), clock())

    def observe(self, conversation: Conversation) -> None:
        """Subscribe to ``conversation``'s events."""
        self._totals = conversation.metrics
        self._answer = SessionMetrics(conversation.metrics.prices)
        events = conversation.events
        events.on(Metric, self._answer.record)
        events.on(UserTranscript, self._user_turn)
        events.on(AssistantTranscript, self._assistant_turn)
        events.on(Interruption, lambda _event: self._event("interruption", {}))
        events.on(FunctionCallInProgress, self._tool_call)
        events.on(FunctionCallResult, self._tool_result)
        events.on(FunctionCallCancelled, self._tool_cancelled)
        events.on(ServiceError, self._service_error)
        events.on(UserTurnMerged, lambda _event: self.store.fold_last_turn(self.session_id))
        events.on(UserSpeechDiscarded, self._discarded)

    # -- what the session reports -----------------------------------------------------------

    def client_updated(self, client: ClientInfo) -> None:
        """The client said who it is (``client-ready``)."""
        self.store.update_client(self.session_id, vars(client).copy())

    def rejected(self, reason: str, error: str) -> None:
        """The client was told something it sent was wrong (``reason``: the kind, ``error``:
        what it was told); counted, written within ``rejected_flush_seconds``."""
        if self._closed:
            return
        counts = self._rejected
        if not counts:
            self._rejected_since = self._clock()
        reason = reason[:MAX_REASON_CHARS]
        if reason not in counts and len(counts) >= MAX_REJECTED_REASONS - 1:
            reason = "other"
        counts[reason] = counts.get(reason, 0) + 1
        self._rejected_example.setdefault(reason, error[:200])
        if self._flush_timer is None:
            loop = asyncio.get_running_loop()
            self._flush_timer = loop.call_later(self._flush_seconds, self.flush_rejected)

    def flush_rejected(self) -> None:
        """Write the rejected messages counted so far as one event (if there were any)."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if not self._rejected:
            return
        data = {
            "counts": self._rejected,
            "examples": self._rejected_example,
            "total": sum(self._rejected.values()),
            "since": datetime.fromtimestamp(self._rejected_since, UTC).isoformat(),
        }
        self._rejected, self._rejected_example = {}, {}
        self._event("rejected-messages", data)

    def close(self, reason: str) -> None:
        """The session ended: its end, reason and final usage (once)."""
        if self._closed:
            return
        self.flush_rejected()
        self._closed = True
        if self.truncated:
            self._write_event("record-skipped", dict(self.skipped))
        self.store.close_session(self.session_id, reason, self._clock(), self._usage())

    @property
    def truncated(self) -> bool:
        """Whether anything was left out of the record (past its budget)."""
        return self.skipped["turns"] + self.skipped["events"] > 0

    def _admit(self, kind: str, size: int) -> bool:
        """Whether a turn or event of ``size`` bytes fits the budget (then it is counted
        as written); else it is counted as skipped, and the first one marks the record."""
        size += ENTRY_OVERHEAD
        if self.written_entries < self.max_entries and self.written_bytes + size <= self.max_bytes:
            self.written_entries += 1
            self.written_bytes += size
            return True
        if not self.truncated:
            data = {
                "max_bytes": self.max_bytes,
                "max_entries": self.max_entries,
                "written_bytes": self.written_bytes,
                "written_entries": self.written_entries,
            }
            self._write_event("record-truncated", data)
        self.skipped[kind] += 1
        self.skipped["bytes"] += size
        return False

    # -- conversation events ----------------------------------------------------------------

    def _user_turn(self, event: UserTranscript) -> None:
        if event.content and self._admit("turns", _text_bytes(event.content)):
            self.store.append_turn(
                self.session_id, "user", event.content, self._clock(), started_at=event.timestamp
            )

    def _assistant_turn(self, event: AssistantTranscript) -> None:
        figures = self._answer.end_turn()
        if not event.content:
            return  # interrupted before a word went out: the interruption event says so
        if not self._admit("turns", _text_bytes(event.content)):
            return
        self.store.append_turn(
            self.session_id,
            "assistant",
            event.content,
            self._clock(),
            started_at=event.timestamp,
            interrupted=event.interrupted,
            metrics=figures.as_dict(),
            usage=self._usage(),
        )

    def _tool_call(self, event: FunctionCallInProgress) -> None:
        call = event.call
        data = {
            "tool_call_id": call.tool_call_id,
            "function_name": call.function_name,
            "arguments": call.arguments,
        }
        self._event("tool-call", data)

    def _tool_result(self, event: FunctionCallResult) -> None:
        data = {
            "tool_call_id": event.tool_call_id,
            "function_name": event.function_name,
            "result": event.result,
            "final": event.is_final,
        }
        self._event("tool-result", data)

    def _tool_cancelled(self, event: FunctionCallCancelled) -> None:
        data = {"tool_call_id": event.tool_call_id, "function_name": event.function_name}
        self._event("tool-cancelled", data)

    def _discarded(self, event: UserSpeechDiscarded) -> None:
        # Speech that made no turn: kept as an event, not a turn. A backchannel is the
        # user listening (its own kind, as before); anything else is a discard, with why.
        data: dict[str, Any] = {"text": event.text}
        if event.onset is not None:  # the session's clock is monotonic: back to wall time
            spoken = time.time() - (time.monotonic() - event.onset)
            data["started_at"] = datetime.fromtimestamp(spoken, UTC).isoformat()
        if event.reason == "backchannel":
            self._event("backchannel", data)
        else:
            self._event("discard", {"reason": event.reason, **data})

    def _service_error(self, event: ServiceError) -> None:
        data = {"service": event.service, "error": event.error, "fatal": event.fatal}
        self._event("error", data)

    def _event(self, type_: str, data: dict[str, Any]) -> None:
        if self._admit("events", len(json.dumps(data, default=str))):
            self._write_event(type_, data)

    def _write_event(self, type_: str, data: dict[str, Any]) -> None:
        self.store.append_event(self.session_id, type_, data, self._clock())

    def _usage(self) -> dict[str, Any]:
        summary = self._totals.summary()
        summary.pop("last_turns", None)
        return summary


def _text_bytes(text: str) -> int:
    """UTF-8 bytes of ``text`` (ASCII is counted without encoding it)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "replace"))
