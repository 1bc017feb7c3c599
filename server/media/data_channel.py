"""The client's ``chat`` data channel: outbound JSON queued until open, inbound routed by kind."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from aiortc import RTCDataChannel
from loguru import logger

from server.api import client_json
from server.api.rate_limit import TokenBucket

# Larger inbound messages are refused before any parsing (the default of the setting).
MAX_MESSAGE_BYTES = 64 * 1024
# Messages waiting for the channel to open; the oldest are dropped past this.
MAX_PENDING = 256
# A flood is reported at most this often (seconds): the reports must not be a flood too.
FLOOD_REPORT_INTERVAL = 2.0


class ChatChannel:
    """Routes ``ping:`` keep-alives, ``signalling`` messages and RTVI JSON to callbacks.

    Every inbound message counts as a sign of life (``on_alive``); text that is too large
    or not JSON (``NaN`` is not) goes to ``on_invalid`` with the reason. Past the ``rate``
    bucket, messages are dropped unread, and ``on_invalid`` hears of it at most every
    couple of seconds. The callbacks run inside aiortc's SCTP receive loop, which an
    exception ends with the call: what they raise goes to ``on_error`` instead.
    """

    def __init__(
        self,
        on_alive: Callable[[], None],
        on_signalling: Callable[[Any], None],
        on_rtvi: Callable[[Any], None],
        on_invalid: Callable[[str], None],
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        rate: TokenBucket | None = None,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self._on_alive = on_alive
        self._on_signalling = on_signalling
        self._on_rtvi = on_rtvi
        self._on_invalid = on_invalid
        self._on_error = on_error
        self._channel: RTCDataChannel | None = None
        self._pending: list[str] = []
        self._max_bytes = max_message_bytes
        self._rate = rate
        self._flood_reported = -FLOOD_REPORT_INTERVAL
        self.pings = 0
        self.dropped = 0

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
        try:
            self._serve(payload)
        except Exception as exc:
            if self._on_error is None:
                logger.opt(exception=exc).error("data channel: serving a message failed")
            else:
                self._on_error(exc)

    def _serve(self, payload: str | bytes) -> None:
        self._on_alive()
        if self._rate is not None and self._rate.take() > 0:
            self.dropped += 1
            now = time.monotonic()
            if now - self._flood_reported >= FLOOD_REPORT_INTERVAL:
                self._flood_reported = now
                limit = f"{self._rate.rate:g} per second, {self._rate.burst:g} at once"
                self._on_invalid(f"too many messages ({limit}): dropping them")
            return
        size = _size(payload, self._max_bytes)
        if size > self._max_bytes:
            self._on_invalid(f"message too large: {size} bytes (limit {self._max_bytes})")
            return
        text = payload if isinstance(payload, str) else payload.decode(errors="replace")
        if text.startswith("ping"):
            self.pings += 1
            return
        try:
            msg = client_json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: absurdly nested JSON
            self._on_invalid("malformed JSON")
            return
        if isinstance(msg, dict) and msg.get("type") == "signalling":
            self._on_signalling(msg.get("message"))  # validated by the session
            return
        self._on_rtvi(msg)


def _size(payload: str | bytes, limit: int) -> int:
    """Bytes in ``payload``, counting text as UTF-8 only when it could matter."""
    if isinstance(payload, bytes) or len(payload) * 4 <= limit:
        return len(payload)  # a short text: even all 4-byte characters would fit
    return len(payload.encode(errors="replace"))
