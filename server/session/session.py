"""One call: its peer connection, data channel, voice pipeline and RTVI, and every task it
starts (the registry of all calls is :mod:`server.session.registry`).

A session owns every task it starts (:mod:`server.session.tasks`); closing it (hang-up,
DELETE, a failed peer, lost liveness, shutdown) runs :mod:`server.session.closing`, which
cancels and awaits them, closes the peer connection and removes it from the registry.
Nothing is left behind, even when a closing step raises or hangs. Our handlers that aiortc
calls (media, data channel, playout) report what they raise to ``faults`` instead of
raising into aiortc, which would end the call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar

from aiortc import RTCSessionDescription
from loguru import logger

from server.guards.rate_limit import TokenBucket
from server.media import channel_signalling
from server.media.data_channel import ChatChannel
from server.media.inbound_audio import PacketGate
from server.media.outbound_track import PacedAudioTrack
from server.media.peer_connection import create_peer_connection
from server.media.video_intake import VideoIntake
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
from server.session.transceivers import MediaAttachment
from server.session.voice import VoiceSession
from server.settings import Settings
from server.storage.recorder import SessionRecorder

__all__ = ["OfferError", "Session", "SessionEnv", "SessionOrigin", "SessionState"]


class OfferError(Exception):
    """The client's offer could not be applied (bad SDP, closed session)."""


class Session:
    """One call: peer connection, data channel, RTVI handler, audio in and out."""

    # Close tasks still running (the registry awaits them at shutdown).
    closing: ClassVar[set[asyncio.Task[None]]] = SessionCloser.running

    def __init__(
        self,
        pc_id: str,
        env: SessionEnv,
        origin: SessionOrigin,
        on_closed: Callable[[Session], None] | None = None,
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
        # By receiver index, validated (server/media/channel_signalling.py): at most 16 booleans.
        self.track_status: dict[str, bool] = {}
        self.faults = SessionFaults(pc_id)
        self.tasks = SessionTasks(pc_id, self._task_failed)
        self._negotiating = asyncio.Lock()
        self.closed = asyncio.Event()
        done = (lambda: on_closed(self)) if on_closed is not None else None
        self.closer = SessionCloser(self, done)
        self._connect(env)
        self._start_pipeline(env)
        self.record = self._recorder(env)
        if env.settings.max_session_seconds > 0:
            self.spawn(self.closer.expire_after(env.settings.max_session_seconds), "max-duration")

    def _connect(self, env: SessionEnv) -> None:
        """The transport: peer connection, outbound track, data channel, RTVI handler."""
        settings = env.settings
        self.pc = create_peer_connection(settings.ice_servers, settings)
        # One budget for all the session's audio receivers (server/media/inbound_audio.py).
        self.audio_gate = PacketGate(
            settings.audio_packet_rate,
            settings.audio_packet_burst,
            on_flood=lambda error: self.rtvi.report(RTVIError(error, reason="audio flood")),
        )
        self.outbound = PacedAudioTrack()
        self.outbound.on_error = lambda exc: self.faults.report("playout", exc)
        self.channel = self._channel(settings)
        self.rtvi: RTVIHandler = RTVIHandler(
            self,
            env.handlers,
            max_text_chars=settings.max_text_chars,
            requests=SessionRequests(self),
        )
        self.rtvi.on_fault = self.faults.report
        self.pc.on("datachannel", self.channel.attach)
        self.pc.on("connectionstatechange", self._on_connection_state)

    def _channel(self, settings: Settings) -> ChatChannel:
        return ChatChannel(
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

    def _start_pipeline(self, env: SessionEnv) -> None:
        """The UI worker, the video intake and the voice pipeline, started."""
        settings, services = env.settings, env.services
        self.ui = UIWorker(settings, self.send, self.spawn, self.rtvi.report, env.ui_event_handlers)
        # The camera and screen tracks, received only for an LLM that can see them.
        self.video = VideoIntake(settings.vision_image_size) if settings.llm_vision else None
        self.media = MediaAttachment(
            self.outbound,
            self.audio_gate,
            settings.audio_jitter_frames,
            self.video,
            on_audio=self._on_audio,
            on_error=lambda exc: self.faults.report("inbound audio", exc),
        )
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
        self.media.attach(self.pc)
        try:
            await self.pc.setLocalDescription(await self.pc.createAnswer())
        except Exception as exc:  # an offer aiortc accepted but cannot answer
            raise OfferError(f"the offer could not be answered: {exc!r}") from exc
        self.touch()
        return self.pc.localDescription

    async def add_candidate(self, candidate: Any) -> None:
        """Add one trickled remote candidate (None = end of candidates)."""
        await self.pc.addIceCandidate(candidate)

    # -- events from the peer -------------------------------------------------------

    def touch(self) -> None:
        """Record a sign of life (ping, message, media)."""
        self.last_activity = time.monotonic()

    def _on_audio(self, frame: bytes) -> None:
        if self.closer.started:
            return  # frames still in flight while the pipeline shuts down
        self.last_activity = time.monotonic()
        self.audio_frames_in += 1
        self.voice.push_audio(frame)

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

    # -- what the RTVI handler, the agent and the app's handlers use ----------------------

    def send(self, msg: dict[str, Any]) -> None:
        """Send one message to the client over the data channel (queued until open)."""
        self.channel.send(msg)

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
