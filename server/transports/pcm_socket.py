"""Plain PCM over a WebSocket: the transport for devices and servers without WebRTC.

Binary messages carry audio both ways, 16 kHz mono signed 16-bit little-endian PCM (in:
any length; out: 20 ms a message, paced); text messages carry the same RTVI JSON as
WebRTC's data channel, so ``client-ready``, ``send-text`` and every event work alike.
On a barge-in the server sends ``{"label": "parley", "type": "audio-clear"}``: drop
what is buffered for playing. The protocol, with a client in a page of Python, is in
``docs/websocket.md``.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.websockets import WebSocket

from pipeline.audio.resampling import StreamResampler
from server.guards import client_json
from server.rtvi.protocol import RTVIError
from server.transports.base import TransportHooks
from server.transports.socket_call import UNSUPPORTED, SocketClosed, SocketLimits, SocketTransport

RATE = 16000
CLEAR = json.dumps({"label": "parley", "type": "audio-clear"})
# What only decorates the call: dropped, not queued, when the client reads slowly.
DROPPABLE = frozenset({"user-audio-level", "bot-audio-level", "metrics", "system-log"})


class PcmSocketTransport(SocketTransport):
    """One call over a plain WebSocket (see the module docstring)."""

    kind: str = "websocket"

    def __init__(self, websocket: WebSocket, hooks: TransportHooks, limits: SocketLimits) -> None:
        super().__init__(websocket, hooks, limits)
        self._resampler = StreamResampler(RATE)
        self.pings = 0

    def receive(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            if len(message) % 2:
                raise SocketClosed(UNSUPPORTED, "audio must be 16-bit PCM: an odd byte count")
            self.take_audio(message)
            return
        if message.startswith("ping"):
            self.pings += 1
            return
        try:
            msg = client_json.loads(message)
        except client_json.TooDeep as exc:
            raise RTVIError(str(exc), exc.msg_id) from None
        except (ValueError, RecursionError):
            raise RTVIError("malformed JSON") from None
        self.hooks.on_rtvi(msg)

    def audio_message(self, pcm: bytes, sample_rate: int) -> str | bytes:
        return self._resampler.resample(pcm, sample_rate)

    def clear_message(self) -> str | bytes | None:
        return CLEAR

    def send(self, msg: dict[str, Any]) -> None:
        if self.state != "connected":
            return
        if msg.get("type") in DROPPABLE and self.backlog > self.max_backlog // 2:
            return
        self.queue(json.dumps(msg, separators=(",", ":")))

    def info(self) -> dict[str, Any]:
        return {**super().info(), "pings": self.pings}
