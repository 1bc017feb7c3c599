"""The client's ``chat`` data channel: outbound JSON queued until open and held to a budget,
inbound routed by kind, and at most a few channels per peer.

Everything sent waits in memory until the client acknowledges it, so a client that stops
acknowledging (or reading) would grow the server without bound: what a session has
queued toward its client, unsent or unacknowledged (:func:`sctp_limits.backlog_bytes`),
is held to ``max_buffered_bytes``. Past half of it, what only decorates the call (audio
levels, metrics, system logs, TTS audio copies) is dropped and replies to requests are
replaced by a short ``error-response`` saying why; past all of it, the association is
aborted with the reason and the session closed (``on_fatal``). A peer that acknowledges
nothing at all is aborted after ``sctp_stall_seconds`` by :mod:`server.media.sctp_limits`.

A peer may open ``max_data_channels`` channels (their messages are served alike); more
are closed at once with an RTVI error, and replies always go to the first ``chat``
channel (else the first one), never to whichever opened last.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from aiortc import RTCDataChannel
from loguru import logger

from server.guards import client_json
from server.guards.rate_limit import TokenBucket
from server.media import sctp_limits
from server.settings.limits_channel import ChannelLimitSettings

# Larger inbound messages are refused before any parsing (the default of the setting).
MAX_MESSAGE_BYTES = 64 * 1024
# Messages waiting for the channel to open; the oldest are dropped past this.
MAX_PENDING = 256
# A flood is reported at most this often (seconds): the reports must not be a flood too.
FLOOD_REPORT_INTERVAL = 2.0
# What a backlogged client loses first: nothing it asked for, nothing the call needs.
DROPPABLE = frozenset(
    {"user-audio-level", "bot-audio-level", "metrics", "system-log", "bot-tts-audio"}
)
CHAT = "chat"


class ChatChannel:
    """Routes ``ping:`` keep-alives, ``signalling`` messages and RTVI JSON to callbacks.

    Every inbound message counts as a sign of life (``on_alive``); text that is too large,
    not UTF-8 or not JSON (``NaN`` is not) goes to ``on_invalid`` with the reason. Past
    the ``rate`` bucket, messages are dropped unread, and ``on_invalid`` hears of it at
    most every couple of seconds. The callbacks run inside aiortc's SCTP receive loop,
    which an exception ends with the call: what they raise goes to ``on_error`` instead.
    ``on_fatal`` hears why the channel cannot go on (the session should close).
    """

    def __init__(
        self,
        on_alive: Callable[[], None],
        on_signalling: Callable[[Any], None],
        on_rtvi: Callable[[Any], None],
        on_invalid: Callable[..., None],  # (reason) or, nested too deep, (reason, msg id)
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        rate: TokenBucket | None = None,
        on_error: Callable[[Exception], None] | None = None,
        limits: ChannelLimitSettings | None = None,
        on_fatal: Callable[[str], None] | None = None,
    ) -> None:
        self._on_alive = on_alive
        self._on_signalling = on_signalling
        self._on_rtvi = on_rtvi
        self._on_invalid = on_invalid
        self._on_error = on_error
        self._on_fatal = on_fatal
        limits = limits or ChannelLimitSettings()
        self._max_buffered = limits.max_buffered_bytes
        self._max_channels = limits.max_data_channels
        self._channel: RTCDataChannel | None = None  # where everything is sent
        self._channels: list[RTCDataChannel] = []  # every channel accepted and not closed
        self._pending: list[str] = []
        self._pending_bytes = 0
        self._max_bytes = max_message_bytes
        self._rate = rate
        self._flood_reported = -FLOOD_REPORT_INTERVAL
        self._refusal_reported = -FLOOD_REPORT_INTERVAL
        self.fatal: str | None = None  # why the channel gave up, once it has
        self.pings = 0
        self.dropped = 0  # inbound messages dropped by the rate limit
        self.shed = 0  # outbound messages dropped or withheld for the backlog

    @property
    def is_open(self) -> bool:
        return self._channel is not None and self._channel.readyState == "open"

    def attach(self, channel: RTCDataChannel) -> None:
        """Serve ``channel`` too, unless the peer has its fill of them; queued messages go
        out as soon as the channel replies use is open."""
        if len(self._channels) >= self._max_channels:
            self._refuse(channel)
            return
        self._channels.append(channel)
        channel.on("message", self._receive)
        channel.on("close", lambda: self._closed(channel))
        if self._channel is None or (_label(channel) == CHAT != _label(self._channel)):
            self._channel = channel
            if channel.readyState == "open":
                self._drain()
            else:
                channel.on("open", self._drain)

    def _refuse(self, channel: RTCDataChannel) -> None:
        channel.close()
        now = time.monotonic()
        if now - self._refusal_reported >= FLOOD_REPORT_INTERVAL:
            self._refusal_reported = now
            limit = self._max_channels
            self._on_invalid(f"too many data channels (limit {limit}): closed {_label(channel)!r}")

    def _closed(self, channel: RTCDataChannel) -> None:
        if channel in self._channels:
            self._channels.remove(channel)
        reason = sctp_limits.abort_reason(getattr(channel, "transport", None))
        if reason is not None:
            self._fail(reason)
        if channel is self._channel:  # replies move to what is left, chat first
            chats = [c for c in self._channels if _label(c) == CHAT]
            remaining = chats or self._channels
            self._channel = remaining[0] if remaining else None

    def _fail(self, reason: str) -> None:
        """Give up: the association goes (with ``reason``) and the session is told."""
        if self.fatal is not None:
            return
        self.fatal = reason
        self._pending, self._pending_bytes = [], 0
        sctp_limits.abort(getattr(self._channel, "transport", None), reason)
        if self._on_fatal is not None:
            self._on_fatal(reason)

    # -- sending -------------------------------------------------------------------

    def send(self, msg: dict[str, Any]) -> None:
        """Send one JSON message, or queue it until the channel opens."""
        if self.fatal is not None:
            return  # closing: nothing more is queued
        text = json.dumps(msg, separators=(",", ":"))
        if self.is_open and not self._pending:
            self._send_text(text, msg)
            return
        self._pending.append(text)
        self._pending_bytes += len(text)
        while len(self._pending) > MAX_PENDING or self._pending_bytes > self._max_buffered:
            self._pending_bytes -= len(self._pending.pop(0))
        if self.is_open:
            self._drain()

    def _drain(self) -> None:
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        for text in pending:
            self._send_text(text, None)

    def _send_text(self, text: str, msg: dict[str, Any] | None) -> None:
        channel = self._channel
        if channel is None or self.fatal is not None:
            return  # given up (the channels went with the association)
        admitted = self._admit(channel, text, msg)
        if admitted is None:
            return
        try:
            channel.send(admitted)
        except Exception as exc:  # the channel closed under us; the session is ending
            logger.debug("data channel send failed: {}", exc)

    def _admit(self, channel: RTCDataChannel, text: str, msg: dict[str, Any] | None) -> str | None:
        """``text``, a short stand-in for it, or None (dropped), by what the client has
        left unacknowledged. JSON text is ASCII: its length is its size in bytes."""
        backlog = sctp_limits.backlog_bytes(channel) + len(text)
        if backlog <= self._max_buffered // 2:
            return text
        if backlog > self._max_buffered:
            self._fail(
                f"the client left {backlog} bytes of its data channel unacknowledged "
                f"(limit {self._max_buffered})"
            )
            return None
        if msg is None:
            msg = json.loads(text)  # queued before the channel opened: rare
        kind = msg.get("type")
        if kind in DROPPABLE:
            self.shed += 1
            return None
        if kind == "server-response":  # answered all the same, in a few bytes
            self.shed += 1
            error = f"reply withheld: {backlog} bytes already wait for the client to acknowledge"
            reply = {**msg, "type": "error-response", "data": {"error": error}}
            return json.dumps(reply, separators=(",", ":"))
        return text

    # -- receiving -----------------------------------------------------------------

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
        if isinstance(payload, sctp_limits.UndecodableText):
            self._on_invalid("malformed text: not UTF-8")
            return
        text = payload if isinstance(payload, str) else payload.decode(errors="replace")
        if text.startswith("ping"):
            self.pings += 1
            return
        try:
            msg = client_json.loads(text)
        except client_json.TooDeep as exc:  # refused with the request's id: error-response
            self._on_invalid(str(exc), exc.msg_id)
            return
        except (ValueError, RecursionError):  # RecursionError: absurdly nested JSON
            self._on_invalid("malformed JSON")
            return
        if isinstance(msg, dict) and msg.get("type") == "signalling":
            self._on_signalling(msg.get("message"))  # validated by the session
            return
        self._on_rtvi(msg)


def _label(channel: RTCDataChannel | None) -> str:
    return getattr(channel, "label", "")  # a test double may have none


def _size(payload: str | bytes, limit: int) -> int:
    """Bytes in ``payload``, counting text as UTF-8 only when it could matter."""
    if isinstance(payload, bytes) or len(payload) * 4 <= limit:
        return len(payload)  # a short text: even all 4-byte characters would fit
    return len(payload.encode(errors="replace"))
