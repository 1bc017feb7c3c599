"""The close sequence of one session: goodbye to the client, the voice pipeline, the
agent's ``on_call_end``, the session's tasks, the video intake, the system log, the
outbound track and the transport (the peer connection, the WebSocket), in that order.

Each step is bounded by :data:`CLOSE_TIMEOUT` and isolated: what one raises (or a hang)
is reported to the session's faults and the next steps run anyway. Whatever happens, the
session ends CLOSED, its end recorded and out of the registry, so its slot is free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, Protocol

from loguru import logger

from server.media.outbound_track import PacedAudioTrack
from server.media.video_intake import VideoIntake
from server.rtvi.system_log import SystemLogForwarder, session_context
from server.session.agent_call import AgentCall
from server.session.faults import SessionFaults
from server.session.state import SessionState
from server.session.tasks import SessionTasks
from server.session.voice import VoiceSession
from server.storage.recorder import SessionRecorder
from server.storage.recording import CallRecording
from server.transports.base import CallTransport

# How long each closing step (the pipeline, the tasks, the peer connection) may take.
CLOSE_TIMEOUT = 5.0


class ClosingSession(Protocol):
    """What the close sequence ends of a session."""

    pc_id: str
    state: SessionState
    close_reason: str | None
    faults: SessionFaults
    transport: CallTransport
    voice: VoiceSession
    agent_call: AgentCall
    tasks: SessionTasks
    video: VideoIntake | None
    system_log: SystemLogForwarder | None
    outbound: PacedAudioTrack
    record: SessionRecorder | None
    recording: CallRecording | None
    closed: asyncio.Event


class SessionCloser:
    """Runs a session's close sequence once, as a task of its own."""

    # Close tasks still running: asyncio keeps only weak references to tasks.
    running: ClassVar[set[asyncio.Task[None]]] = set()

    def __init__(
        self, session: ClosingSession, on_closed: Callable[[], None] | None = None
    ) -> None:
        self._session = session
        self._on_closed = on_closed
        self._task: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        return self._task is not None

    def request(self, reason: str, error: str | None = None) -> None:
        """Start closing (idempotent); returns at once. With ``error``, the client is told
        first with a fatal RTVI ``error``. The task stays in :attr:`running` until done
        (the registry awaits them at shutdown)."""
        if self._task is None:
            pc_id = self._session.pc_id
            with session_context(pc_id):
                task = asyncio.create_task(self._close(reason, error), name=f"close:{pc_id}")
            self._task = task
            SessionCloser.running.add(task)
            task.add_done_callback(SessionCloser.running.discard)

    async def close(self, reason: str, error: str | None = None) -> None:
        """Close and wait until everything the session owned is gone."""
        self.request(reason, error)
        assert self._task is not None
        await asyncio.shield(self._task)

    async def expire_after(self, seconds: float) -> None:
        """Close the session once it has lasted ``seconds`` (run as one of its tasks)."""
        await asyncio.sleep(seconds)
        limit = f"{seconds:g} s"
        logger.info("session {}: reached the maximum duration of {}", self._session.pc_id, limit)
        error = f"the session reached its maximum duration ({limit})"
        self.request("maximum duration reached", error=error)

    async def _close(self, reason: str, error: str | None) -> None:
        session = self._session
        session.state = SessionState.CLOSING
        session.close_reason = reason
        logger.info("session {} closing: {}", session.pc_id, reason)
        try:
            await self._step("saying goodbye", session.transport.goodbye(error))
            await self._step("closing the voice pipeline", session.voice.close())
            await self._step("the agent's on_call_end", session.agent_call.ended(reason))
            await self._step("ending the session's tasks", session.tasks.end())
            if session.video is not None:
                await self._step("closing the video intake", session.video.close())
            if session.system_log is not None:
                self._call("closing the system log", session.system_log.close)
            self._call("stopping the outbound track", session.outbound.stop)
            await self._step("closing the transport", session.transport.close())
            if session.recording is not None:  # its last seconds written, the file whole
                await self._step("finishing the recording", session.recording.close())
        finally:
            # Whatever failed above (or a cancellation): the session ends closed, its end
            # recorded, and out of the registry, so its slot is free.
            self._finish(reason)

    def _finish(self, reason: str) -> None:
        session = self._session
        session.state = SessionState.CLOSED
        if session.record is not None:
            self._call("recording the end", session.record.close, reason)
        if session.recording is not None:  # if a step above failed: it finishes on its own
            self._call("stopping the recording", session.recording.stop)
        session.closed.set()
        if self._on_closed is not None:
            self._call("leaving the registry", self._on_closed)

    async def _step(self, what: str, step: Coroutine[Any, Any, Any]) -> None:
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await step
        except Exception as exc:  # TimeoutError included: the next steps run anyway
            self._session.faults.report(f"close: {what}", exc)

    def _call(self, what: str, step: Callable[..., Any], *args: Any) -> None:
        try:
            step(*args)
        except Exception as exc:
            self._session.faults.report(f"close: {what}", exc)
