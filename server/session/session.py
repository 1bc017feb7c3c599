"""One call: a transport (:mod:`server.transports`: WebRTC, a phone line, a plain
WebSocket), its voice pipeline and RTVI, and every task it starts (the registry of all
calls is :mod:`server.session.registry`).

A session owns every task it starts (:mod:`server.session.tasks`); closing it (hang-up,
DELETE, a failed peer, lost liveness, shutdown) runs :mod:`server.session.closing`, which
cancels and awaits them, closes the transport and removes it from the registry. Nothing
is left behind, even when a closing step raises or hangs. Our handlers that a transport
calls (media, messages, playout) report what they raise to ``faults`` instead of raising
into its receive loop, which would end the call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar

from aiortc import RTCSessionDescription
from loguru import logger

from server.media.outbound_track import OUT_RATE
from server.rtvi import protocol
from server.rtvi.handler import RTVIHandler
from server.rtvi.protocol import RTVIError
from server.rtvi.system_log import SystemLogForwarder, session_context
from server.rtvi.ui_worker import UIWorker
from server.session.agent_call import AgentCall
from server.session.client_requests import SessionRequests
from server.session.closing import SessionCloser
from server.session.faults import SessionFaults
from server.session.info import session_info
from server.session.params import SessionEnv, SessionOrigin
from server.session.state import SessionState
from server.session.tasks import SessionTasks
from server.session.voice import VoiceSession
from server.storage.recorder import SessionRecorder
from server.storage.recording import CallRecording
from server.storage.recordings import RecordingDirectory
from server.transports.base import CallTransport, TransportFactory, TransportHooks
from server.transports.webrtc import OfferError, WebRTCTransport

__all__ = ["OfferError", "Session", "SessionEnv", "SessionOrigin", "SessionState"]


class Session:
    """One call: its transport, voice pipeline, RTVI handler and tasks."""

    # Close tasks still running (the registry awaits them at shutdown).
    closing: ClassVar[set[asyncio.Task[None]]] = SessionCloser.running

    def __init__(
        self,
        pc_id: str,
        env: SessionEnv,
        origin: SessionOrigin,
        on_closed: Callable[[Session], None] | None = None,
        transport: TransportFactory = WebRTCTransport,
    ) -> None:
        self.pc_id = pc_id
        self.owner = origin.owner  # the credential that created it (auth.require_api_key)
        self.start_id = origin.start_id
        self.client = origin.client
        self.request_data = origin.request_data
        self.state = SessionState.CONNECTING
        self.close_reason: str | None = None
        self.created_at = time.time()
        self.last_activity = time.monotonic()
        self.audio_frames_in = 0
        self.faults = SessionFaults(pc_id)
        self.tasks = SessionTasks(pc_id, self._task_failed)
        self._negotiating = asyncio.Lock()
        self.closed = asyncio.Event()
        done = (lambda: on_closed(self)) if on_closed is not None else None
        self.closer = SessionCloser(self, done)
        self._connect(env, transport)
        self._start_pipeline(env)
        self.record = self._recorder(env)
        self._recording(env)
        if env.settings.max_session_seconds > 0:
            self.spawn(self.closer.expire_after(env.settings.max_session_seconds), "max-duration")

    def _connect(self, env: SessionEnv, factory: TransportFactory) -> None:
        """The transport, and the RTVI handler of what the client sends over it."""
        hooks = TransportHooks(
            on_audio=self._on_audio,
            on_rtvi=self._on_rtvi,
            on_alive=self.touch,
            on_connected=self._on_connected,
            on_report=lambda exc: self.rtvi.report(exc),
            on_fault=self.faults.report,
            on_close=self.request_close,
            on_dtmf=self._on_dtmf,
        )
        self.transport: CallTransport = factory(env.settings, hooks)
        self.outbound = self.transport.outbound
        self.audio_gate = self.transport.audio_gate
        self.video = self.transport.video
        self.rtvi: RTVIHandler = RTVIHandler(
            self,
            env.handlers,
            max_text_chars=env.settings.max_text_chars,
            requests=SessionRequests(self),
        )
        self.rtvi.on_fault = self.faults.report

    def _start_pipeline(self, env: SessionEnv) -> None:
        """The UI worker, the video intake and the voice pipeline, started."""
        settings, services = env.settings, env.services
        self.ui = UIWorker(settings, self.send, self.spawn, self.rtvi.report, env.ui_event_handlers)
        self.voice = VoiceSession(
            services,
            settings,
            self.outbound,
            self.send,
            ui=self.ui,
            video=self.video,
            client_protocol=self.rtvi.client_protocol,  # as client-ready settles it
        )
        self.voice.conversation.events.on_error = self._event_handler_failed
        self.voice.on_fault = self.faults.report
        self.voice.on_end_call = self.request_close  # an idle user (PARLEY_USER_IDLE_TIMEOUT)
        self.system_log: SystemLogForwarder | None = None
        if settings.rtvi_system_log != "off":
            self.system_log = SystemLogForwarder(self.pc_id, self.send, settings.rtvi_system_log)
        with session_context(self.pc_id):  # the pipeline's tasks log as this session's
            self.voice.start()
            self.agent_call = AgentCall(self, services.agent)  # its hooks run from now on
        self.call_context = self.agent_call.context  # what the agent's handlers are given

    def _recorder(self, env: SessionEnv) -> SessionRecorder | None:
        """The transcript record of the call (None without a store), observing it."""
        if env.store is None:
            return None
        record = SessionRecorder(
            env.store,
            self.pc_id,
            self.start_id,
            self.client,
            max_bytes=env.settings.max_record_bytes,
            max_entries=env.settings.max_record_entries,
        )
        record.observe(self.voice.conversation)
        self.rtvi.error_listeners.append(lambda exc: record.rejected(exc.reason, exc.error))
        return record

    def _recording(self, env: SessionEnv) -> None:
        """Whether the call is recorded (``PARLEY_RECORDING``): the caller as heard, the bot
        as the track plays it. The recording (its file, its worker thread) starts at the
        first audio of either side (:meth:`_start_recording`): a session that never
        connects, or never speaks, costs none."""
        self.recording: CallRecording | None = None
        self._recording_notice = ""
        path = RecordingDirectory.of(env.settings).path(self.pc_id)
        self._recording_path = path if env.settings.recording else None
        if self._recording_path is None:
            return
        self._recording_notice = env.settings.recording_notice.strip()
        self.outbound.on_frame_out = self._first_bot_frame

    def _first_bot_frame(self, pcm: bytes) -> None:
        """The track's frames until one is not silence: that one starts the recording."""
        if pcm.count(0) != len(pcm):  # in C: one pass over a frame's 1920 bytes at most
            recording = self._start_recording()
            if recording is not None:
                recording.bot(pcm)

    def _start_recording(self) -> CallRecording | None:
        """The recording, started now if it is not yet (None: the call is not recorded,
        or is closing)."""
        if self.recording is None and self._recording_path is not None:
            if self.closer.started:
                return None
            self.recording = CallRecording(self._recording_path, bot_rate=OUT_RATE)
            self.outbound.on_frame_out = self.recording.bot
        return self.recording

    # -- negotiation --------------------------------------------------------------

    @property
    def webrtc(self) -> WebRTCTransport:
        """The call's peer connection; :class:`OfferError` if it is not a WebRTC call."""
        if not isinstance(self.transport, WebRTCTransport):
            raise OfferError(f"a {self.transport.kind} call takes no WebRTC offer")
        return self.transport

    async def negotiate(self, sdp: str, sdp_type: str) -> RTCSessionDescription:
        """Apply the client's offer and return our answer (with all our candidates)."""
        # aiortc starts its transports' tasks here: they (and the callbacks they run)
        # inherit the session's logging context.
        async with self._negotiating:
            with session_context(self.pc_id):
                if self.state in (SessionState.CLOSING, SessionState.CLOSED):
                    raise OfferError("the session is closing")
                return await self.webrtc.negotiate(sdp, sdp_type)

    async def add_candidate(self, candidate: Any) -> None:
        """Add one trickled remote candidate (None = end of candidates)."""
        await self.webrtc.add_candidate(candidate)

    # -- events from the peer -------------------------------------------------------

    def touch(self) -> None:
        """Record a sign of life (ping, message, media)."""
        self.last_activity = time.monotonic()

    def _on_audio(self, frame: bytes) -> None:
        if self.closer.started:
            return  # frames still in flight while the pipeline shuts down
        self.last_activity = time.monotonic()
        self.audio_frames_in += 1
        recording = self.recording
        if recording is None and self._recording_path is not None:
            recording = self._start_recording()
        if recording is not None:
            recording.user(frame)
        self.voice.push_audio(frame)

    def _event_handler_failed(self, exc: Exception, event: Any) -> None:
        self.faults.report(f"{type(event).__name__} handler", exc)

    def _on_connected(self) -> None:
        logger.debug("session {}: {} connected", self.pc_id, self.transport.kind)
        if self.state == SessionState.CONNECTING:
            self.state = SessionState.CONNECTED

    def _on_dtmf(self, digit: str) -> None:
        self.touch()
        try:
            self.voice.keypad.press(digit)
        except Exception as exc:  # one key must not end the call's receive loop
            self.faults.report("keypad", exc)

    def greet(self) -> None:
        """The client can hear us: the recording notice (``PARLEY_RECORDING_NOTICE``, when
        the call is recorded), then the greeting."""
        if self._recording_path is not None and self._recording_notice:
            self.agent_call.announce(self._recording_notice, self.voice.client_ready)
        else:
            self.voice.client_ready()

    def _on_rtvi(self, raw: Any) -> None:
        with session_context(self.pc_id):
            self.rtvi.handle(raw)

    # -- what the RTVI handler, the agent and the app's handlers use ----------------------

    def send(self, msg: dict[str, Any]) -> None:
        """Send one message to the client over the transport (WebRTC: the data channel,
        queued until it opens)."""
        self.transport.send(msg)

    async def summarize_context(self) -> dict[str, Any]:
        """Summarize the conversation's older history now; the outcome (see
        :meth:`pipeline.context.budget.ContextBudget.summarize_now`)."""
        return await self.voice.summarize_now()

    def send_server_message(self, data: Any) -> None:
        """Push an app-defined message to the client (RTVI ``server-message``)."""
        self.send(protocol.message("server-message", data))

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a task this session owns (cancelled when it closes)."""
        return self.tasks.spawn(coro, name)

    def _task_failed(self, task: asyncio.Task[Any], exc: BaseException) -> None:
        name = task.get_name().partition(":")[2]
        self.faults.report(f"task {name}", exc)
        self.rtvi.report(RTVIError(f"internal error in {task.get_name()}"))

    # -- closing ------------------------------------------------------------------

    def request_close(self, reason: str, error: str | None = None) -> None:
        """Start closing (idempotent); returns at once. With ``error``, the client is told
        first with a fatal RTVI ``error`` (the session ends because of it)."""
        self.closer.request(reason, error)

    async def close(self, reason: str, error: str | None = None) -> None:
        """Close and wait until everything the session owned is gone."""
        await self.closer.close(reason, error)

    # -- reporting --------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """A JSON-ready summary for the session endpoints."""
        return session_info(self)
