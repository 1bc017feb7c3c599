"""The client's ``chat`` data channel: outbound JSON queued until open, inbound routed by kind."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiortc import RTCDataChannel
from loguru import logger

# Larger inbound messages are refused before any parsing.
MAX_MESSAGE_BYTES = 64 * 1024
# Messages waiting for the channel to open; the oldest are dropped past this.
MAX_PENDING = 256


class ChatChannel:
    """Routes ``ping:`` keep-alives, ``signalling`` messages and RTVI JSON to callbacks.

    Every inbound message counts as a sign of life (``on_alive``); text that is too large
    or not JSON goes to ``on_invalid`` with the reason.
    """

    def __init__(
        self,
        on_alive: Callable[[], None],
        on_signalling: Callable[[dict[str, Any]], None],
        on_rtvi: Callable[[Any], None],
        on_invalid: Callable[[str], None],
    ) -> None:
        self._on_alive = on_alive
        self._on_signalling = on_signalling
        self._on_rtvi = on_rtvi
        self._on_invalid = on_invalid
        self._channel: RTCDataChannel | None = None
        self._pending: list[str] = []
        self.pings = 0

    @property
    def is_open(self) -> bool:
        return self._channel is not None and self._channel.readyState == "open"

    def attach(self, channel: RTCDataChannel) -> None:
        """Use ``channel`` from now on; queued messages go out as soon as it is open."""
        self._channel = channel
        channel.on("message", self._receive)
        if channel.readyState == "open":
            self._drain()
        else:
            channel.on("open", self._drain)

    def send(self, msg: dict[str, Any]) -> None:
        """Send one JSON message, or queue it until the channel opens."""
        text = json.dumps(msg, separators=(",", ":"))
        if self.is_open and not self._pending:
            self._send_text(text)
            return
        self._pending.append(text)
        if len(self._pending) > MAX_PENDING:
            del self._pending[0]
        if self.is_open:
            self._drain()

    def _drain(self) -> None:
        pending, self._pending = self._pending, []
        for text in pending:
            self._send_text(text)

    def _send_text(self, text: str) -> None:
        assert self._channel is not None
        try:
            self._channel.send(text)
        except Exception as exc:  # the channel closed under us; the session is ending
            logger.debug("data channel send failed: {}", exc)

    def _receive(self, payload: str | bytes) -> None:
        self._on_alive()
        if len(payload) > MAX_MESSAGE_BYTES:
            self._on_invalid(f"message too large: {len(payload)} bytes (limit {MAX_MESSAGE_BYTES})")
            return
        text = payload if isinstance(payload, str) else payload.decode(errors="replace")
        if text.startswith("ping"):
            self.pings += 1
            return
        try:
            msg = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: absurdly nested JSON
            self._on_invalid("malformed JSON")
            return
        if isinstance(msg, dict) and msg.get("type") == "signalling":
            inner = msg.get("message")
            self._on_signalling(inner if isinstance(inner, dict) else {})
            return
        self._on_rtvi(msg)
