"""WebRTC, the first transport: an aiortc peer connection answering the client's offer,
Opus both ways, the ``chat`` data channel for RTVI, and the camera for an LLM that sees."""

from __future__ import annotations

import asyncio
from typing import Any

from aiortc import RTCSessionDescription
from loguru import logger

from server.guards.rate_limit import TokenBucket
from server.media import channel_signalling
from server.media.data_channel import ChatChannel
from server.media.inbound_audio import PacketGate
from server.media.outbound_track import PacedAudioTrack
from server.media.peer_connection import create_peer_connection, release_peer_connection
from server.media.transceivers import MediaAttachment
from server.media.video_intake import VideoIntake
from server.rtvi import protocol
from server.rtvi.protocol import RTVIError
from server.settings import Settings
from server.transports.base import TransportHooks


class OfferError(Exception):
    """The client's offer could not be applied (bad SDP, closed session)."""


class WebRTCTransport:
    """One call's peer connection, data channel, audio track and video intake."""

    kind = "webrtc"

    def __init__(self, settings: Settings, hooks: TransportHooks) -> None:
        self._hooks = hooks
        self.pc = create_peer_connection(settings.ice_servers, settings)
        # One budget for all the session's audio receivers (server/media/inbound_audio.py).
        self.audio_gate = PacketGate(
            settings.audio_packet_rate,
            settings.audio_packet_burst,
            on_flood=lambda error: hooks.on_report(RTVIError(error, reason="audio flood")),
        )
        self.outbound = PacedAudioTrack(dtx=settings.audio_dtx)
        self.outbound.on_error = lambda exc: hooks.on_fault("playout", exc)
        self.channel = ChatChannel(
            on_alive=hooks.on_alive,
            on_signalling=self._on_signalling,
            on_rtvi=hooks.on_rtvi,
            on_invalid=lambda reason, msg_id=None: hooks.on_report(RTVIError(reason, msg_id)),
            max_message_bytes=settings.max_message_bytes,
            rate=TokenBucket(settings.message_rate, settings.message_burst),
            on_error=lambda exc: hooks.on_fault("data channel", exc),
            limits=settings,
            on_fatal=lambda reason: hooks.on_close(reason, reason),
        )
        # By receiver index, validated (server/media/channel_signalling.py): at most 16.
        self.track_status: dict[str, bool] = {}
        # The camera and screen tracks, received only for an LLM that can see them.
        self.video = VideoIntake(settings.vision_image_size) if settings.llm_vision else None
        self.media = MediaAttachment(
            self.outbound,
            self.audio_gate,
            settings.audio_jitter_frames,
            self.video,
            on_audio=hooks.on_audio,
            on_error=lambda exc: hooks.on_fault("inbound audio", exc),
        )
        self._closing = False
        self.pc.on("datachannel", self.channel.attach)
        self.pc.on("connectionstatechange", self._on_connection_state)

    @property
    def connection_state(self) -> str:
        return str(self.pc.connectionState)

    # -- negotiation --------------------------------------------------------------

    async def negotiate(self, sdp: str, sdp_type: str) -> RTCSessionDescription:
        """Apply the client's offer and return our answer (with all our candidates)."""
        if self._closing:
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
        self._hooks.on_alive()
        return self.pc.localDescription

    async def add_candidate(self, candidate: Any) -> None:
        """Add one trickled remote candidate (None = end of candidates)."""
        await self.pc.addIceCandidate(candidate)

    # -- events from the peer -------------------------------------------------------

    def _on_connection_state(self) -> None:
        state = self.pc.connectionState
        logger.debug("peer connection {}", state)
        if state == "connected":
            self._hooks.on_connected()
        elif state in ("failed", "closed"):
            self._hooks.on_close(f"peer connection {state}", None)

    def _on_signalling(self, message: Any) -> None:
        try:
            status = channel_signalling.parse(message)
        except RTVIError as exc:
            self._hooks.on_report(exc)
            return
        self.track_status[str(status.receiver_index)] = status.enabled

    # -- the call's side ------------------------------------------------------------

    def send(self, msg: dict[str, Any]) -> None:
        """Send one message over the data channel (queued until it opens)."""
        self.channel.send(msg)

    def info(self) -> dict[str, Any]:
        return {
            "connection_state": self.pc.connectionState,
            "data_channel_open": self.channel.is_open,
            "pings": self.channel.pings,
            "audio_packets_dropped": self.audio_gate.dropped,
            **self.media.audio_loss(),
            "track_status": dict(self.track_status),
        }

    async def goodbye(self, error: str | None) -> None:
        self._closing = True
        channel = self.channel
        if channel.is_open:
            if error is not None:
                channel.send(protocol.error(error, fatal=True))
            channel.send(channel_signalling.peer_left())
            await asyncio.sleep(0.05)  # let SCTP send it before the transport goes

    async def close(self) -> None:
        self._closing = True
        try:
            await self.pc.close()
        finally:
            release_peer_connection(self.pc)
