"""The transport interface: what a call needs from whatever carries it.

A call is a pipeline plus a transport (:class:`server.session.session.Session` holds
both). The transport takes the caller's audio in as 20 ms frames of 16 kHz mono s16
(``TransportHooks.on_audio``), plays the bot through a :class:`PacedAudioTrack` (paced
20 ms frames, ``flush`` and ``pause`` for barge-in, segments reported as they are
played), carries JSON events both ways where it can (``send``; the client's RTVI to
``on_rtvi``) and closes. Everything else (the registry, limits, liveness, drain,
storage, metrics, the pipeline) is the session's and the same for every transport.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from server.media.inbound_audio import PacketGate
from server.media.outbound_track import PacedAudioTrack
from server.media.video_intake import VideoIntake
from server.rtvi.protocol import RTVIError


@dataclass(frozen=True, slots=True)
class TransportHooks:
    """What a transport tells its session. None of these may raise into the transport's
    receive loop: the session's implementations report their own faults."""

    on_audio: Callable[[bytes], None]  # one 20 ms frame, 16 kHz mono s16
    on_rtvi: Callable[[Any], None]  # one client message, parsed JSON
    on_alive: Callable[[], None]  # any sign of life
    on_connected: Callable[[], None]  # media can flow
    on_report: Callable[[RTVIError], None]  # bad input, told to the client
    on_fault: Callable[[str, Exception], None]  # ours, counted
    on_close: Callable[[str, str | None], None]  # (reason, error for the client or None)
    on_dtmf: Callable[[str], None]  # a key the caller pressed


class CallTransport(Protocol):
    """One call's transport (see the module docstring)."""

    kind: str  # "webrtc", "phone", "websocket"
    outbound: PacedAudioTrack
    audio_gate: PacketGate  # the inbound audio budget (metrics count its drops)
    video: VideoIntake | None

    @property
    def connection_state(self) -> str:
        """ "new", "connecting", "connected", "closed" or "failed"."""
        ...

    def send(self, msg: dict[str, Any]) -> None:
        """Send one JSON event to the client (dropped where the transport has no channel)."""
        ...

    def info(self) -> dict[str, Any]:
        """The transport's figures for the session endpoints."""
        ...

    async def goodbye(self, error: str | None) -> None:
        """Tell the client the call ends (with ``error``: why, as a fatal RTVI error)."""
        ...

    async def close(self) -> None:
        """Close the connection (the outbound track is stopped by the session)."""
        ...


TransportFactory = Callable[[Any, TransportHooks], CallTransport]
"""Makes a call's transport from the settings and the session's hooks."""
