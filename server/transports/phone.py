"""A phone call: a telephony provider's media stream (Twilio, Telnyx, Plivo, Exotel,
Vonage: :mod:`server.telephony`) as a call's transport.

The provider's dialect turns its messages into stream events and our audio into its
messages; this transport feeds the events to the session (the caller's audio, keys
pressed, the end of the stream) and clears the provider's buffer on a barge-in. There is
no event channel: RTVI events are dropped, as a phone has no screen.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from loguru import logger
from starlette.websockets import WebSocket

from server.telephony.json_messages import number
from server.telephony.stream_events import (
    ProviderStream,
    StreamAudio,
    StreamDtmf,
    StreamMarkPlayed,
    StreamProtocolError,
    StreamStarted,
    StreamStopped,
)
from server.transports.base import TransportHooks
from server.transports.socket_call import POLICY, SocketClosed, SocketLimits, SocketTransport

MARK_FRAMES = 5  # a mark every 100 ms of the bot's audio
# Hangs the call up at the provider (its REST API), given the provider's call id.
HangUp = Callable[[str], Awaitable[None]]


class PhoneTransport(SocketTransport):
    """One phone call's media stream, its start message already read."""

    kind: str = "phone"

    def __init__(
        self,
        websocket: WebSocket,
        hooks: TransportHooks,
        limits: SocketLimits,
        stream: ProviderStream,
        started: StreamStarted,
        hang_up: HangUp | None = None,
    ) -> None:
        super().__init__(websocket, hooks, limits)
        self.stream = stream
        self.started = started
        self._hang_up = hang_up
        self.marks_played = 0
        self.hung_up = False
        self._frames = 0
        self._played: int | None = None  # the latest mark played back: a sent position
        self._cut_at = -1  # the sent position at the last cut: marks up to it were not heard
        self.outbound.played_position = self._played_position

    def receive(self, message: str | bytes) -> None:
        try:
            event = self.stream.parse(message)
        except StreamProtocolError as exc:
            raise SocketClosed(POLICY, f"{self.stream.provider}: {exc}") from None
        if isinstance(event, StreamAudio):
            self.take_audio(event.pcm)
        elif isinstance(event, StreamDtmf):
            self.hooks.on_dtmf(event.digit)
        elif isinstance(event, StreamMarkPlayed):
            self.marks_played += 1
            # Ours name the sent position they were queued at. Providers play back on a
            # clear the marks it dropped: those were never heard.
            position = number(event.name, 18)
            if position is not None and position > self._cut_at:
                self._played = max(self._played or 0, position)
        elif isinstance(event, StreamStopped):
            self.state = "closed"
            self.hooks.on_close("the caller hung up", None)
        elif isinstance(event, StreamStarted):  # a dialect refuses a second one itself
            raise SocketClosed(POLICY, "a second start")

    def audio_message(self, pcm: bytes, sample_rate: int) -> str | bytes:
        return self.stream.media(pcm, sample_rate)

    def clear_message(self) -> str | bytes | None:
        self._cut_at = self.outbound.sent_position
        return self.stream.clear()

    def audio_sent(self) -> None:
        # A mark every MARK_FRAMES: the provider plays it back once the audio before it has
        # been heard, so a barge-in keeps only the words the caller heard, not all we sent.
        self._frames += 1
        if self._frames % MARK_FRAMES == 0:
            mark = self.stream.mark(str(self.outbound.sent_position))
            if mark is not None:
                self.queue(mark)

    def _played_position(self) -> int:
        sent = self.outbound.sent_position
        return sent if self._played is None else min(sent, self._played)

    def info(self) -> dict[str, Any]:
        return {
            **super().info(),
            "provider": self.stream.provider,
            "call_id": self.started.call_id or None,
            "marks_played": self.marks_played,
            "media_oversized": self.stream.oversized,
        }

    async def close(self) -> None:
        # Ended from our side while the caller is still on: hang up at the provider too
        # (closing the stream alone leaves a <Connect> call on the line until TwiML ends).
        if self.state != "closed" and self._hang_up is not None and self.started.call_id:
            try:
                await self._hang_up(self.started.call_id)
                self.hung_up = True
            except Exception as exc:
                logger.warning("phone call {}: hanging up failed: {}", self.started.call_id, exc)
        await super().close()
