"""What the WebSocket transports share: the bot's audio pumped out in paced 20 ms
messages, a bounded outbox drained by one writer, the caller's audio cut into 20 ms
frames through the session's audio budget, and the close with a reason.

The outbox is bounded: a client that stops reading would otherwise grow the server
without limit (every 20 ms of bot speech is a message). Past ``max_backlog`` bytes the
call ends with the reason. Audio goes out paced on the wall clock, as over WebRTC, so
what was sent is what the far end is playing give or take its jitter buffer, and a
barge-in (``PacedAudioTrack.on_cut``) sends the dialect's clear message at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass
from typing import Any

from loguru import logger
from starlette.websockets import WebSocket, WebSocketState

from server.guards.rate_limit import TokenBucket
from server.media.inbound_audio import PacketGate
from server.media.outbound_track import OUT_RATE, PacedAudioTrack
from server.media.video_intake import VideoIntake
from server.rtvi.protocol import RTVIError
from server.transports.base import TransportHooks

FRAME_BYTES = 640  # 20 ms of 16 kHz mono s16, what the pipeline takes
# Messages dropped over the budget, in bursts' worth, before the call is closed: a client
# this far over is flooding, and each message it sends still costs a parse.
FLOOD_BURSTS = 5
# WebSocket close codes (RFC 6455 section 7.4.1).
NORMAL, POLICY, UNSUPPORTED, TOO_BIG, INTERNAL, TRY_LATER = 1000, 1008, 1003, 1009, 1011, 1013


class SocketClosed(Exception):
    """The call's WebSocket must close: ``code`` and ``reason`` say why."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SocketLimits:
    """One WebSocket call's bounds: its audio budget (20 ms frames), its message budget
    (any message), the largest message, and the bytes it may leave unsent."""

    audio: PacketGate
    messages: TokenBucket
    max_message: int
    max_backlog: int


class SocketTransport:
    """A call over one accepted WebSocket; subclasses speak a dialect (:meth:`receive`,
    :meth:`audio_message`, :meth:`clear_message`)."""

    kind: str = "websocket"
    video: VideoIntake | None = None  # no camera over a WebSocket

    def __init__(self, websocket: WebSocket, hooks: TransportHooks, limits: SocketLimits) -> None:
        self.websocket = websocket
        self.hooks = hooks
        self.limits = limits
        self.audio_gate = limits.audio
        self.outbound = PacedAudioTrack()
        self.outbound.on_error = lambda exc: hooks.on_fault("playout", exc)
        self.outbound.on_cut = self._cut
        self.max_backlog = limits.max_backlog
        self._outbox: deque[str | bytes] = deque()
        self.backlog = 0
        self._wake = asyncio.Event()
        self._pending = bytearray()  # the caller's audio short of a whole frame
        self.state = "connecting"
        self.close_code = NORMAL
        self.close_reason = ""
        self.sent_messages = 0
        self.received_messages = 0
        self.dropped_messages = 0  # over the message budget

    # -- what a dialect implements ----------------------------------------------------

    def receive(self, message: str | bytes) -> None:
        """One message from the far end; raises :class:`SocketClosed` to end the call."""
        raise NotImplementedError

    def audio_message(self, pcm: bytes, sample_rate: int) -> str | bytes:
        """20 ms of the bot (mono s16 at ``sample_rate``) as one message."""
        raise NotImplementedError

    def clear_message(self) -> str | bytes | None:
        """The message that drops what the far end has buffered, if it has one."""
        return None

    # -- the session's side -------------------------------------------------------------

    @property
    def connection_state(self) -> str:
        return self.state

    def send(self, msg: dict[str, Any]) -> None:
        """A JSON event; a dialect without an event channel drops it."""

    def info(self) -> dict[str, Any]:
        return {
            "connection_state": self.state,
            "data_channel_open": self.state == "connected",
            "audio_packets_dropped": self.audio_gate.dropped,
            "messages_in": self.received_messages,
            "messages_out": self.sent_messages,
            "messages_dropped": self.dropped_messages,
        }

    async def goodbye(self, error: str | None) -> None:
        if error is not None and self.close_code == NORMAL:
            self.close_code, self.close_reason = POLICY, error

    async def close(self) -> None:
        self.state = "closed"
        self._wake.set()
        if self.websocket.application_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):  # the far end may have gone already
                reason = self.close_reason[:120]  # a close frame's reason: at most 123 bytes
                await self.websocket.close(self.close_code, reason)

    # -- running --------------------------------------------------------------------

    def queue(self, message: str | bytes) -> None:
        """Send ``message`` soon, in order; past the backlog bound the call ends."""
        if self.state in ("closed", "failed"):
            return
        self._outbox.append(message)
        self.backlog += len(message)
        self._wake.set()
        if self.backlog > self.max_backlog:
            self.state = "failed"
            reason = f"the client is not reading: {self.backlog} bytes wait to be sent"
            self.close_code, self.close_reason = POLICY, reason
            self._outbox.clear()
            self.backlog = 0
            self.hooks.on_close(reason, None)

    def take_audio(self, pcm: bytes) -> None:
        """The caller's 16 kHz mono s16, any length: whole 20 ms frames go to the session,
        each through the audio budget."""
        pending = self._pending
        pending += pcm
        while len(pending) >= FRAME_BYTES:
            frame = bytes(pending[:FRAME_BYTES])
            del pending[:FRAME_BYTES]
            if self.audio_gate.admit():
                self.hooks.on_audio(frame)

    async def run(self, first: list[str | bytes] | None = None) -> None:
        """Serve the call until either side ends it (``first``: messages already read)."""
        self.state = "connected"
        self.hooks.on_connected()
        tasks = [asyncio.create_task(self._write()), asyncio.create_task(self._pump())]
        try:
            for message in first or []:
                self._serve(message)
            await self._read()
        except SocketClosed as exc:
            self.close_code, self.close_reason = exc.code, exc.reason
            self.hooks.on_close(exc.reason, exc.reason)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _read(self) -> None:
        while self.state == "connected":
            event = await self.websocket.receive()
            if event["type"] == "websocket.disconnect":
                self.state = "closed"
                self.hooks.on_close("the client hung up", None)
                return
            message = event.get("text")
            self._serve(message if message is not None else event.get("bytes") or b"")

    def _serve(self, message: str | bytes) -> None:
        self.received_messages += 1
        self.hooks.on_alive()
        limits = self.limits
        if len(message) > limits.max_message:  # text: characters, at most 4 bytes each
            raise SocketClosed(TOO_BIG, f"a message over {limits.max_message} bytes")
        if limits.messages.take() > 0:
            self.dropped_messages += 1
            rate = f"{limits.messages.rate:g} a second, {limits.messages.burst:g} at once"
            if self.dropped_messages == 1:  # once: a flood is a stream of drops
                self.hooks.on_report(RTVIError(f"too many messages ({rate}): dropping them"))
            if self.dropped_messages > FLOOD_BURSTS * limits.messages.burst:
                raise SocketClosed(POLICY, f"too many messages ({rate}): closed")
            return
        try:
            self.receive(message)
        except SocketClosed:
            raise
        except RTVIError as exc:
            self.hooks.on_report(exc)
        except Exception as exc:  # ours: counted, and the call goes on
            self.hooks.on_fault(f"{self.kind} message", exc)

    async def _write(self) -> None:
        websocket = self.websocket
        while self.state != "closed":
            await self._wake.wait()
            self._wake.clear()
            while self._outbox:
                message = self._outbox.popleft()
                self.backlog -= len(message)
                if isinstance(message, str):
                    await websocket.send_text(message)
                else:
                    await websocket.send_bytes(message)
                self.sent_messages += 1

    async def _pump(self) -> None:
        """The bot's paced audio: each 20 ms the track has (silence is not sent)."""
        track = self.outbound
        while True:
            pcm = await track.recv_pcm()
            if track.playing and not track.paused:
                self.queue(self.audio_message(pcm, OUT_RATE))
                self.audio_sent()

    def audio_sent(self) -> None:
        """Called after each 20 ms of the bot is queued (a dialect may add a marker)."""

    def _cut(self) -> None:
        clear = self.clear_message()
        if clear is not None:
            self.queue(clear)
            logger.debug("{}: the far end's buffered audio cleared", self.kind)
