"""One session per peer connection, and the registry that owns them all.

A session owns every task it starts; closing it (hang-up, DELETE, a failed peer, lost
liveness, shutdown) cancels and awaits them, closes the peer connection and removes it
from the registry. Nothing is left behind.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from aiortc import MediaStreamTrack, RTCSessionDescription
from loguru import logger

from server.channel import ChatChannel
from server.rtvi import ClientReadyData, RTVIError, SendTextData
from server.rtvi_handler import ClientMessageHandler, RTVIHandler
from server.services import Services
from server.settings import Settings
from server.voice import VoiceSession
from server.webrtc import (
    PacedAudioTrack,
    create_peer_connection,
    read_inbound_audio,
    release_peer_connection,
)

# How long closing may wait for the peer connection to shut down.
CLOSE_TIMEOUT = 5.0


class SessionState(StrEnum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSING = "closing"
    CLOSED = "closed"


class CapacityError(Exception):
    """All ``max_sessions`` slots are taken."""


class OfferError(Exception):
    """The client's offer could not be applied (bad SDP, closed session)."""


@dataclass
class ClientInfo:
    """Who is on the other end: from the HTTP request and from ``client-ready``."""

    remote_addr: str | None = None
    user_agent: str | None = None
    library: str | None = None
    library_version: str | None = None
    platform: str | None = None
    rtvi_version: str | None = None


@dataclass
class StartRecord:
    """A ``POST /start`` session id, waiting for (or bound to) its peer connection."""

    session_id: str
    request_data: Any
    created: float = field(default_factory=time.monotonic)
    pc_id: str | None = None


def _iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).isoformat()


class Session:
    """One call: peer connection, data channel, RTVI handler, audio in and out."""

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
    ) -> None:
        self.pc_id = pc_id
        self.start_id = start_id
        self.client = client
        self.request_data = request_data
        self.state = SessionState.CONNECTING
        self.close_reason: str | None = None
        self.created_at = time.time()
        self.last_activity = time.monotonic()
        self.audio_frames_in = 0
        self.track_status: dict[str, Any] = {}

        self.pc = create_peer_connection(settings.ice_servers)
        self.outbound = PacedAudioTrack()
        self.channel = ChatChannel(
            on_alive=self.touch,
            on_signalling=self._on_signalling,
            on_rtvi=self._on_rtvi,
            on_invalid=lambda reason: self.rtvi.report(RTVIError(reason)),
        )
        self.rtvi = RTVIHandler(self, handlers)
        self.voice = VoiceSession(services, settings, self.outbound, self.send)
        self.voice.start()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._inbound: asyncio.Task[Any] | None = None
        self._negotiating = asyncio.Lock()
        self._close_task: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        self._on_closed = on_closed

        self.pc.on("track", self._on_track)
        self.pc.on("datachannel", self.channel.attach)
        self.pc.on("connectionstatechange", self._on_connection_state)

    # -- negotiation --------------------------------------------------------------

    async def negotiate(self, sdp: str, sdp_type: str) -> RTCSessionDescription:
        """Apply the client's offer and return our answer (with all our candidates)."""
        async with self._negotiating:
            if self.state in (SessionState.CLOSING, SessionState.CLOSED):
                raise OfferError("the session is closing")
            try:
                await self.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type=sdp_type))
            except Exception as exc:
                raise OfferError(f"the offer could not be applied: {exc}") from exc
            self._attach_media()
            await self.pc.setLocalDescription(await self.pc.createAnswer())
            self.touch()
            return self.pc.localDescription

    def _attach_media(self) -> None:
        # Audio is answered sendrecv with our paced track; video (camera, screen) is
        # answered inactive so that the browser sends none and we decode none.
        for transceiver in self.pc.getTransceivers():
            if transceiver.kind == "audio":
                if transceiver.sender.track is None:
                    transceiver.sender.replaceTrack(self.outbound)
                transceiver.direction = "sendrecv"
            elif transceiver.direction != "inactive":
                transceiver.direction = "inactive"

    async def add_candidate(self, candidate: Any) -> None:
        """Add one trickled remote candidate (None = end of candidates)."""
        await self.pc.addIceCandidate(candidate)

    # -- events from the peer -------------------------------------------------------

    def touch(self) -> None:
        """Record a sign of life (ping, message, media)."""
        self.last_activity = time.monotonic()

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind != "audio":
            return
        if self._inbound is not None:
            self._inbound.cancel()
        self._inbound = self.spawn(read_inbound_audio(track, self._on_audio), "inbound-audio")

    def _on_audio(self, frame: bytes) -> None:
        self.last_activity = time.monotonic()
        self.audio_frames_in += 1
        self.voice.push_audio(frame)

    def _on_connection_state(self) -> None:
        state = self.pc.connectionState
        if state == "connected" and self.state == SessionState.CONNECTING:
            self.state = SessionState.CONNECTED
        elif state in ("failed", "closed"):
            self.request_close(f"peer connection {state}")

    def _on_signalling(self, message: dict[str, Any]) -> None:
        if message.get("type") == "trackStatus":
            self.track_status[str(message.get("receiver_index"))] = message.get("enabled")

    def _on_rtvi(self, raw: Any) -> None:
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
        self.voice.client_ready()

    def send_text(self, data: SendTextData) -> None:
        options = data.options
        self.voice.send_text(
            data.content,
            run_immediately=options.run_immediately if options else True,
            audio_response=options.audio_response if options else True,
        )

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a task this session owns (cancelled when it closes)."""
        task = asyncio.create_task(coro, name=f"{self.pc_id[:8]}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.opt(exception=task.exception()).error("session task {} failed", task.get_name())
            self.rtvi.report(RTVIError(f"internal error in {task.get_name()}"))

    # -- closing ------------------------------------------------------------------

    def request_close(self, reason: str) -> None:
        """Start closing (idempotent); returns at once."""
        if self._close_task is None:
            self._close_task = asyncio.create_task(self._close(reason), name=f"close:{self.pc_id}")

    async def close(self, reason: str) -> None:
        """Close and wait until everything the session owned is gone."""
        self.request_close(reason)
        assert self._close_task is not None
        await asyncio.shield(self._close_task)

    async def _close(self, reason: str) -> None:
        self.state = SessionState.CLOSING
        self.close_reason = reason
        logger.info("session {} closing: {}", self.pc_id, reason)
        if self.channel.is_open:
            self.channel.send({"type": "signalling", "message": {"type": "peerLeft"}})
            await asyncio.sleep(0.05)  # let SCTP send it before the transport goes
        try:
            await self.voice.close()
        except Exception as exc:
            logger.warning("session {}: closing the voice pipeline: {!r}", self.pc_id, exc)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.outbound.stop()
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await self.pc.close()
        except Exception as exc:
            logger.warning("session {}: peer connection close: {!r}", self.pc_id, exc)
        release_peer_connection(self.pc)
        self.state = SessionState.CLOSED
        self.closed.set()
        if self._on_closed is not None:
            self._on_closed(self)

    # -- reporting --------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """A JSON-ready summary for the session endpoints."""
        idle = time.monotonic() - self.last_activity
        return {
            "pc_id": self.pc_id,
            "session_id": self.start_id,
            "state": self.state.value,
            "created_at": _iso(self.created_at),
            "last_activity": _iso(time.time() - idle),
            "idle_seconds": round(idle, 3),
            "client": vars(self.client).copy(),
            "connection_state": self.pc.connectionState,
            "data_channel_open": self.channel.is_open,
            "pings": self.channel.pings,
            "audio_frames_in": self.audio_frames_in,
            "track_status": dict(self.track_status),
            "request_data": self.request_data,
            "conversation": self.voice.info(),
        }


def new_id() -> str:
    """An unguessable identifier for sessions and peer connections."""
    return secrets.token_urlsafe(16)
