"""One call: its peer connection, data channel, voice pipeline and RTVI, and every task it
starts (the registry of all calls is :mod:`server.session.registry`).

A session owns every task it starts; closing it (hang-up, DELETE, a failed peer, lost
liveness, shutdown) cancels and awaits them, closes the peer connection and removes it
from the registry. Nothing is left behind, even when a closing step raises or hangs.
Our handlers that aiortc calls (media, data channel, playout) report what they raise to
``faults`` instead of raising into aiortc, which would end the call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
from enum import StrEnum
from typing import Any, ClassVar

from aiortc import RTCRtpReceiver, RTCSessionDescription
from loguru import logger

from pipeline.task_cancel import cancel_and_wait
from server.guards.rate_limit import TokenBucket
from server.media import channel_signalling
from server.media.data_channel import ChatChannel
from server.media.inbound_audio import InboundAudio, PacketGate, set_jitter_prefetch
from server.media.outbound_track import PacedAudioTrack
from server.media.peer_connection import create_peer_connection, release_peer_connection
from server.media.video_intake import VideoIntake
from server.rtvi import protocol
from server.rtvi.handler import ClientMessageHandler, RTVIHandler
from server.rtvi.protocol import ClientReadyData, FunctionCallResultData, RTVIError, SendTextData
from server.rtvi.system_log import SystemLogForwarder, session_context
from server.rtvi.ui_worker import UIEventHandler, UIWorker
from server.session.agent_call import AgentCall
from server.session.faults import SessionFaults
from server.session.info import session_info
from server.session.services import Services
from server.session.voice import VoiceSession
from server.settings import Settings
from server.storage.recorder import SessionRecorder
from server.storage.store import ClientInfo, TranscriptStore

# How long each closing step (the pipeline, the tasks, the peer connection) may take.
CLOSE_TIMEOUT = 5.0


class SessionState(StrEnum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSING = "closing"
    CLOSED = "closed"


class OfferError(Exception):
    """The client's offer could not be applied (bad SDP, closed session)."""


class Session:
    """One call: peer connection, data channel, RTVI handler, audio in and out."""

    # Close tasks still running: asyncio keeps only weak references to tasks.
    closing: ClassVar[set[asyncio.Task[None]]] = set()

    def __init__(
        self,
        pc_id: str,
        settings: Settings,
        services: Services,
        handlers: dict[str, ClientMessageHandler],
        client: ClientInfo,
        request_data: Any = None,
        start_id: str | None = None,
        on_closed: Callable[[Session], None] | None = None,
        store: TranscriptStore | None = None,
        owner: str | None = None,
        ui_event_handlers: Mapping[str, UIEventHandler] | None = None,
    ) -> None:
        self.pc_id = pc_id
        self.owner = owner  # the credential that created it (auth.require_api_key)
        self.start_id = start_id
        self.client = client
        self.request_data = request_data
        self.state = SessionState.CONNECTING
        self.close_reason: str | None = None
        self.created_at = time.time()
        self.last_activity = time.monotonic()
        self.audio_frames_in = 0
        # By receiver index, validated (server/media/channel_signalling.py): at most 16 booleans.
        self.track_status: dict[str, bool] = {}
        self.faults = SessionFaults(pc_id)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._inbound: dict[RTCRtpReceiver, InboundAudio] = {}
        self._negotiating = asyncio.Lock()
        self._close_task: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        self._on_closed = on_closed
        self._connect(settings, handlers)
        self._start_pipeline(settings, services, ui_event_handlers)
        self.record: SessionRecorder | None = None
        if store is not None:
            record = self.record = SessionRecorder(
                store,
                pc_id,
                start_id,
                client,
                max_bytes=settings.max_record_bytes,
                max_entries=settings.max_record_entries,
            )
            record.observe(self.voice.conversation)
            self.rtvi.error_listeners.append(lambda exc: record.rejected(exc.reason, exc.error))
        if settings.max_session_seconds > 0:
            self.spawn(self._expire_after(settings.max_session_seconds), "max-duration")

    def _connect(self, settings: Settings, handlers: dict[str, ClientMessageHandler]) -> None:
        """The transport: peer connection, outbound track, data channel, RTVI handler."""
        self.pc = create_peer_connection(settings.ice_servers, settings)
        self._jitter_frames = settings.audio_jitter_frames
        # One budget for all the session's audio receivers (server/media/inbound_audio.py).
        self.audio_gate = PacketGate(
            settings.audio_packet_rate,
            settings.audio_packet_burst,
            on_flood=lambda error: self.rtvi.report(RTVIError(error, reason="audio flood")),
        )
        self.outbound = PacedAudioTrack()
        self.outbound.on_error = lambda exc: self.faults.report("playout", exc)
        self.channel = ChatChannel(
            on_alive=self.touch,
            on_signalling=self._on_signalling,
            on_rtvi=self._on_rtvi,
            on_invalid=lambda reason, msg_id=None: self.rtvi.report(RTVIError(reason, msg_id)),
            max_message_bytes=settings.max_message_bytes,
            rate=TokenBucket(settings.message_rate, settings.message_burst),
            on_error=lambda exc: self.faults.report("data channel", exc),
            limits=settings,
            on_fatal=lambda reason: self.request_close(reason, error=reason),
        )
        self.rtvi = RTVIHandler(self, handlers, max_text_chars=settings.max_text_chars)
        self.rtvi.on_fault = self.faults.report
        self.pc.on("datachannel", self.channel.attach)
        self.pc.on("connectionstatechange", self._on_connection_state)

    def _start_pipeline(
        self,
        settings: Settings,
        services: Services,
        ui_event_handlers: Mapping[str, UIEventHandler] | None,
    ) -> None:
        """The UI worker, the video intake and the voice pipeline, started."""
        self.ui = UIWorker(settings, self.send, self.spawn, self.rtvi.report, ui_event_handlers)
        # The camera and screen tracks, received only for an LLM that can see them.
        self.video = VideoIntake(settings.vision_image_size) if settings.llm_vision else None
        self.voice = VoiceSession(
            services, settings, self.outbound, self.send, ui=self.ui, video=self.video
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

    # -- negotiation --------------------------------------------------------------

    async def negotiate(self, sdp: str, sdp_type: str) -> RTCSessionDescription:
        """Apply the client's offer and return our answer (with all our candidates)."""
        # aiortc starts its transports' tasks here: they (and the callbacks they run)
        # inherit the session's logging context.
        async with self._negotiating:
            with session_context(self.pc_id):
                return await self._negotiate(sdp, sdp_type)

    async def _negotiate(self, sdp: str, sdp_type: str) -> RTCSessionDescription:
        if self.state in (SessionState.CLOSING, SessionState.CLOSED):
            raise OfferError("the session is closing")
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type=sdp_type))
        except Exception as exc:
            raise OfferError(f"the offer could not be applied: {exc}") from exc
        self._attach_media()
        try:
            await self.pc.setLocalDescription(await self.pc.createAnswer())
        except Exception as exc:  # an offer aiortc accepted but cannot answer
            raise OfferError(f"the offer could not be answered: {exc!r}") from exc
        self.touch()
        return self.pc.localDescription

    def _attach_media(self) -> None:
        # Audio is answered sendrecv with our paced track; video (camera, screen) recvonly
        # for an LLM that sees (decoded only when it looks: server/media/video_intake.py), else
        # inactive so that the browser sends none.
        for transceiver in self.pc.getTransceivers():
            receiver = transceiver.receiver
            if transceiver.kind == "audio":
                set_jitter_prefetch(receiver, self._jitter_frames)
                if receiver not in self._inbound:
                    inbound = InboundAudio(
                        self._on_audio, self._audio_handler_failed, gate=self.audio_gate
                    )
                    self._inbound[receiver] = inbound
                    inbound.attach(receiver)
                if transceiver.sender.track is None:
                    transceiver.sender.replaceTrack(self.outbound)
                transceiver.direction = "sendrecv"
            elif transceiver.kind == "video" and self.video and self.video.attach(receiver):
                transceiver.direction = "recvonly"
            elif transceiver.direction != "inactive":
                transceiver.direction = "inactive"

    async def add_candidate(self, candidate: Any) -> None:
        """Add one trickled remote candidate (None = end of candidates)."""
        await self.pc.addIceCandidate(candidate)

    # -- events from the peer -------------------------------------------------------

    def touch(self) -> None:
        """Record a sign of life (ping, message, media)."""
        self.last_activity = time.monotonic()

    def _on_audio(self, frame: bytes) -> None:
        if self._close_task is not None:
            return  # frames still in flight while the pipeline shuts down
        self.last_activity = time.monotonic()
        self.audio_frames_in += 1
        self.voice.push_audio(frame)

    def _audio_handler_failed(self, exc: Exception) -> None:
        self.faults.report("inbound audio", exc)

    def _event_handler_failed(self, exc: Exception, event: Any) -> None:
        self.faults.report(f"{type(event).__name__} handler", exc)

    def _on_connection_state(self) -> None:
        state = self.pc.connectionState
        logger.debug("session {}: peer connection {}", self.pc_id, state)
        if state == "connected" and self.state == SessionState.CONNECTING:
            self.state = SessionState.CONNECTED
        elif state in ("failed", "closed"):
            self.request_close(f"peer connection {state}")

    def _on_signalling(self, message: Any) -> None:
        try:
            status = channel_signalling.parse(message)
        except RTVIError as exc:
            self.rtvi.report(exc)
            return
        self.track_status[str(status.receiver_index)] = status.enabled

    def _on_rtvi(self, raw: Any) -> None:
        with session_context(self.pc_id):
            self.rtvi.handle(raw)

    # -- what the RTVI handler and the pipeline use -----------------------------------

    def send(self, msg: dict[str, Any]) -> None:
        """Send one message to the client over the data channel (queued until open)."""
        self.channel.send(msg)

    def set_client(self, ready: ClientReadyData) -> None:
        self.client.rtvi_version = ready.version
        if ready.about is not None:
            self.client.library = ready.about.library
            self.client.library_version = ready.about.library_version
            self.client.platform = ready.about.platform
        if self.record is not None:
            self.record.client_updated(self.client)
        self.voice.client_ready()

    def send_text(self, data: SendTextData) -> None:
        options = data.options
        self.voice.send_text(
            data.content,
            run_immediately=options.run_immediately if options else True,
            audio_response=options.audio_response if options else True,
        )

    def client_tool_result(self, data: FunctionCallResultData) -> None:
        """RTVI ``llm-function-call-result``; raises ``ClientToolError`` if no such call
        waits for the client."""
        self.voice.client_tool_result(data.tool_call_id, data.function_name, data.result)

    async def summarize_context(self) -> dict[str, Any]:
        """Summarize the conversation's older history now; the outcome (see
        :meth:`pipeline.context.budget.ContextBudget.summarize_now`)."""
        return await self.voice.summarize_now()

    def send_server_message(self, data: Any) -> None:
        """Push an app-defined message to the client (RTVI ``server-message``)."""
        self.send(protocol.message("server-message", data))

    def handle_ui(self, type_: str, msg_id: str, data: Any) -> None:
        """A UI worker protocol message (``ui-snapshot``, ``ui-event``, ``ui-cancel-job-group``)."""
        self.ui.handle(type_, msg_id, data)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a task this session owns (cancelled when it closes)."""
        with session_context(self.pc_id):
            task = asyncio.create_task(coro, name=f"{self.pc_id[:8]}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            name = task.get_name().partition(":")[2]
            self.faults.report(f"task {name}", exc)
            self.rtvi.report(RTVIError(f"internal error in {task.get_name()}"))

    # -- closing ------------------------------------------------------------------

    async def _expire_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        limit = f"{seconds:g} s"
        logger.info("session {}: reached the maximum duration of {}", self.pc_id, limit)
        error = f"the session reached its maximum duration ({limit})"
        self.request_close("maximum duration reached", error=error)

    def request_close(self, reason: str, error: str | None = None) -> None:
        """Start closing (idempotent); returns at once. With ``error``, the client is told
        first with a fatal RTVI ``error`` (the session ends because of it). The task stays
        in ``Session.closing`` until done (the registry awaits them at shutdown)."""
        if self._close_task is None:
            with session_context(self.pc_id):
                task = asyncio.create_task(self._close(reason, error), name=f"close:{self.pc_id}")
            self._close_task = task
            Session.closing.add(task)
            task.add_done_callback(Session.closing.discard)

    async def close(self, reason: str, error: str | None = None) -> None:
        """Close and wait until everything the session owned is gone."""
        self.request_close(reason, error)
        assert self._close_task is not None
        await asyncio.shield(self._close_task)

    async def _close(self, reason: str, error: str | None) -> None:
        self.state = SessionState.CLOSING
        self.close_reason = reason
        logger.info("session {} closing: {}", self.pc_id, reason)
        try:
            await self._close_step("saying goodbye", self._say_goodbye(error))
            await self._close_step("closing the voice pipeline", self.voice.close())
            await self._close_step("the agent's on_call_end", self.agent_call.ended(reason))
            await self._close_step("ending the session's tasks", self._end_tasks())
            if self.video is not None:
                await self._close_step("closing the video intake", self.video.close())
            if self.system_log is not None:
                self._close_call("closing the system log", self.system_log.close)
            self._close_call("stopping the outbound track", self.outbound.stop)
            await self._close_step("closing the peer connection", self.pc.close())
            self._close_call("releasing the peer connection", release_peer_connection, self.pc)
        finally:
            # Whatever failed above (or a cancellation): the session ends closed, its end
            # recorded, and out of the registry, so its slot is free.
            self.state = SessionState.CLOSED
            if self.record is not None:
                self._close_call("recording the end", self.record.close, reason)
            self.closed.set()
            if self._on_closed is not None:
                self._close_call("leaving the registry", self._on_closed, self)

    async def _close_step(self, what: str, step: Coroutine[Any, Any, Any]) -> None:
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await step
        except Exception as exc:  # TimeoutError included: the next steps run anyway
            self.faults.report(f"close: {what}", exc)

    def _close_call(self, what: str, step: Callable[..., Any], *args: Any) -> None:
        try:
            step(*args)
        except Exception as exc:
            self.faults.report(f"close: {what}", exc)

    async def _say_goodbye(self, error: str | None) -> None:
        if self.channel.is_open:
            if error is not None:
                self.channel.send(protocol.error(error, fatal=True))
            self.channel.send(channel_signalling.peer_left())
            await asyncio.sleep(0.05)  # let SCTP send it before the transport goes

    async def _end_tasks(self) -> None:
        await cancel_and_wait(self._tasks)

    # -- reporting --------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """A JSON-ready summary for the session endpoints."""
        return session_info(self)
