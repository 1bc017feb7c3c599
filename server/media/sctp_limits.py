"""Bounds on what a peer can make aiortc's SCTP association hold or do: a patch applied at
import (:func:`install`, from :mod:`server.media.peer_connection`).

aiortc 1.16.0's ``RTCSctpTransport`` trusts its peer. Here:

- **A peer that acknowledges nothing** is retransmitted to at the same RTO forever there
  (no back-off, no Association.Max.Retrans) while what we send piles up. Here T3 backs
  off (RFC 4960 6.3.3 E2) and the association is aborted after ``max_retransmissions``
  timeouts in a row, or once the peer's cumulative acknowledgement has not moved for
  ``stall_seconds`` while data waits (gap reports do not count: acknowledging all but
  the first chunk holds everything after it). What may wait is the data channel's
  budget (:func:`backlog_bytes`, used by :mod:`server.media.data_channel`).
- **Reassembly** takes a message of any size and rescans the buffered fragments for each
  new one (quadratic; a message that never ends grows forever). Here what a peer leaves
  unfinished (bytes plus :data:`FRAGMENT_COST` a fragment, so tiny fragments count) is
  held to ``receive_buffer_bytes``, the window we advertise fits in it, and a fragment
  that is the highest yet and not a message's last no longer triggers a rescan (it
  cannot complete one): linear. TSNs received past a missing one are bounded too.
- **Streams**: it advertises 65,535 and keeps state for any stream id a peer names. Here
  it advertises ``max_streams``, and DATA on others is handled as RFC 4960 6.5 says
  (acknowledged, reported with an Invalid Stream Identifier ERROR, discarded).
- **SACK gap reports** are walked TSN by TSN: one packet can name 20 million. Here they
  are clipped to what we have outstanding.
- **Peer input raising out of its receive loop** ends the DTLS transport, so the call,
  with a "Task exception was never retrieved" traceback: text that is not UTF-8, a DCEP
  OPEN for an open stream, an ACK for none. Here such text reaches the channel as
  :class:`UndecodableText` (the session answers with an RTVI error), bad DCEP messages
  are dropped, and anything else a limited association raises on input aborts it.

An abort sends an ABORT whose "User-Initiated Abort" cause is the reason and closes the
data channels (the session hears of it through ``chat``). Only transports given limits
(:func:`limit`, by :class:`LimitedPeerConnection`) are limited; others (test clients)
keep aiortc's behaviour but for linear reassembly and safe decoding. Upstream would
need all of the above as options of ``RTCSctpTransport``. The wrappers assume the
sources fingerprinted in :data:`PATCHED`; :func:`drift` names any that changed (a test
fails then).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from struct import pack
from typing import Any, cast

from aiortc import RTCDataChannel, RTCPeerConnection, RTCSessionDescription
from aiortc.rtcsctptransport import (
    SCTP_CAUSE_INVALID_STREAM,
    SCTP_DATA_LAST_FRAG,
    SCTP_RTO_MAX,
    USERDATA_MAX_LENGTH,
    WEBRTC_DCEP,
    WEBRTC_STRING,
    AbortChunk,
    DataChunk,
    ErrorChunk,
    ForwardTsnChunk,
    InboundStream,
    RTCSctpTransport,
    SackChunk,
)
from aiortc.utils import uint32_gt
from loguru import logger

from server.settings.limits_channel import ChannelLimitSettings

# What one buffered fragment costs beyond its bytes (the chunk object, its bytes object,
# the list slot), measured at about 170 bytes: a peer sending 1-byte fragments is
# bounded too.
FRAGMENT_COST = 256
# What one chunk on the send side costs at most: a full fragment and its bookkeeping.
CHUNK_COST = USERDATA_MAX_LENGTH + 512
# RFC 4960 section 3.3.10.12: the cause an ABORT carries a reason in.
USER_INITIATED_ABORT = 12
MAX_REASON_BYTES = 200
# DCEP (RFC 8832) message types.
DCEP_ACK, DCEP_OPEN = 2, 3

_GUARD = "_parley_guard"
_ABORTED = "_parley_abort_reason"
_CLOSED = RTCSctpTransport.State.CLOSED


class UndecodableText(bytes):
    """A text (PPID 51) message whose bytes are not UTF-8, delivered as its bytes."""


@dataclass(frozen=True)
class SctpLimits:
    """What one peer's association may hold and how long it may stall."""

    receive_buffer_bytes: int
    max_streams: int
    max_retransmissions: int
    stall_seconds: float

    @classmethod
    def from_settings(cls, settings: ChannelLimitSettings | None = None) -> SctpLimits:
        s = settings or ChannelLimitSettings()
        return cls(
            receive_buffer_bytes=s.sctp_receive_buffer_bytes,
            # Channel ids are even for one side, odd for the other: n channels need 2n
            # streams; one more pair lets a channel reopen while the old one closes.
            max_streams=2 * (s.max_data_channels + 1),
            max_retransmissions=s.sctp_max_retransmissions,
            stall_seconds=s.sctp_stall_seconds,
        )

    @property
    def advertised_window(self) -> int:
        """The receive window we advertise: full fragments filling it stay in budget."""
        per_fragment = USERDATA_MAX_LENGTH + FRAGMENT_COST
        return self.receive_buffer_bytes * USERDATA_MAX_LENGTH // per_fragment

    @property
    def max_out_of_order(self) -> int:
        """TSNs received ahead of a gap (aiortc sorts them for every chunk received)."""
        return self.advertised_window // USERDATA_MAX_LENGTH + 64


@dataclass(slots=True)
class _Guard:
    """One limited association's counters."""

    limits: SctpLimits
    t3_failures: int = 0
    progress_at: float = field(default_factory=time.monotonic)
    watchdog: asyncio.TimerHandle | None = None


class LimitedPeerConnection(RTCPeerConnection):
    """A peer connection whose SCTP association gets ``limits`` as soon as it exists
    (the offer's application section makes it, before the association starts)."""

    def __init__(self, configuration: Any = None, limits: SctpLimits | None = None) -> None:
        super().__init__(configuration)
        self._sctp_limits = limits or SctpLimits.from_settings()

    async def setRemoteDescription(self, sessionDescription: RTCSessionDescription) -> None:
        await super().setRemoteDescription(sessionDescription)
        if self.sctp is not None:
            limit(self.sctp, self._sctp_limits)


def limit(sctp: RTCSctpTransport, limits: SctpLimits) -> None:
    """Apply ``limits`` to ``sctp``; the stream count and window only before it starts."""
    if getattr(sctp, _GUARD, None) is not None:
        return
    setattr(sctp, _GUARD, _Guard(limits))
    if sctp.state == "new":
        sctp._inbound_streams_max = limits.max_streams
        sctp._advertised_rwnd = limits.advertised_window


def backlog_bytes(channel: RTCDataChannel) -> int:
    """At most what sending on ``channel`` holds in memory until the peer acknowledges
    it: the bytes not yet handed to SCTP, plus every chunk since the peer's cumulative
    acknowledgement (counted from the TSNs, at :data:`CHUNK_COST` each)."""
    sctp = getattr(channel, "transport", None)
    if not isinstance(sctp, RTCSctpTransport):
        return 0  # a test double: nothing held that we could see
    unacked = (sctp._local_tsn - sctp._last_sacked_tsn - 1) % 2**32
    return channel.bufferedAmount + unacked * CHUNK_COST


def abort(sctp: RTCSctpTransport | None, reason: str) -> None:
    """Abort the association, telling the peer ``reason`` in the ABORT; its data channels
    close now. Nothing happens if it is already closed (or None)."""
    if not isinstance(sctp, RTCSctpTransport) or sctp._association_state == _CLOSED:
        return
    logger.info("SCTP association aborted: {}", reason)
    setattr(sctp, _ABORTED, reason)
    chunk = AbortChunk()
    chunk.params.append((USER_INITIATED_ABORT, reason.encode()[:MAX_REASON_BYTES]))
    _spawn(_send_quietly(sctp, chunk))
    sctp._set_state(_CLOSED)


def abort_reason(sctp: RTCSctpTransport | None) -> str | None:
    """Why this server aborted ``sctp`` (None: it did not, or there is none)."""
    return getattr(sctp, _ABORTED, None)


# -- the patch ------------------------------------------------------------------------------

_tasks: set[asyncio.Task[None]] = set()  # asyncio keeps only weak references to tasks


def _spawn(coro: Any) -> None:
    _tasks.add(task := asyncio.ensure_future(coro))
    task.add_done_callback(_tasks.discard)


async def _send_quietly(sctp: RTCSctpTransport, chunk: Any) -> None:
    try:
        await sctp._send_chunk(chunk)
    except ConnectionError:  # the DTLS transport is gone already
        pass


def _guard(sctp: RTCSctpTransport) -> _Guard | None:
    return getattr(sctp, _GUARD, None)


# aiortc's originals, taken once by install().
_orig: dict[str, Callable[..., Any]] = {}


class _CountedStream(InboundStream):
    """An ``InboundStream`` as :func:`install` leaves it (a type only, never made)."""

    _parley_bytes: int  # what the stream's reassembly queue holds
    _parley_quiet: bool  # the last chunk cannot have completed a message


def _add_chunk(self: _CountedStream, chunk: DataChunk) -> None:
    appended = not self.reassembly or uint32_gt(chunk.tsn, self.reassembly[-1].tsn)
    _orig["add_chunk"](self, chunk)
    self._parley_bytes += len(chunk.user_data)
    # The highest TSN so far and not a last fragment: no message can be complete.
    self._parley_quiet = appended and not chunk.flags & SCTP_DATA_LAST_FRAG


def _pop_messages(self: _CountedStream) -> Iterator[tuple[int, int, bytes]]:
    if self._parley_quiet:
        self._parley_quiet = False
        return
    for message in _orig["pop_messages"](self):
        self._parley_bytes -= len(message[2])
        yield message


def _prune_chunks(self: _CountedStream, tsn: int) -> int:
    size: int = _orig["prune_chunks"](self, tsn)
    self._parley_bytes -= size
    return size


def _held(sctp: RTCSctpTransport) -> int:
    """What the peer's unfinished messages cost us now."""
    streams = cast(Iterable[_CountedStream], sctp._inbound_streams.values())  # see install()
    return sum(s._parley_bytes + len(s.reassembly) * FRAGMENT_COST for s in streams)


async def _receive_data_chunk(self: RTCSctpTransport, chunk: DataChunk) -> None:
    guard = _guard(self)
    if guard is None:
        return await _orig["_receive_data_chunk"](self, chunk)
    if self._association_state == _CLOSED:
        return None
    if chunk.stream_id >= self._inbound_streams_max:
        return await _invalid_stream(self, chunk)
    await _orig["_receive_data_chunk"](self, chunk)
    if _too_far_ahead(self, guard):
        return None
    stream = self._inbound_streams.get(chunk.stream_id)
    if stream is None or not stream.reassembly:
        return None  # delivered: nothing more is held than before
    budget = guard.limits.receive_buffer_bytes
    if _held(self) > budget:
        abort(self, f"unfinished messages over {budget} bytes (max-message-size or window)")
    return None


def _too_far_ahead(sctp: RTCSctpTransport, guard: _Guard) -> bool:
    """Aborts a peer that leaves a TSN out and sends on: aiortc keeps (and sorts, for
    every chunk) each TSN received past the gap, even of messages it delivered."""
    if len(sctp._sack_misordered) <= guard.limits.max_out_of_order:
        return False
    abort(sctp, f"over {guard.limits.max_out_of_order} chunks received past a missing one")
    return True


async def _invalid_stream(sctp: RTCSctpTransport, chunk: DataChunk) -> None:
    """RFC 4960 section 6.5: acknowledge, report with an ERROR chunk, discard."""
    sctp._sack_needed = True
    if sctp._mark_received(chunk.tsn):
        return  # a duplicate
    guard = _guard(sctp)
    if guard is not None and _too_far_ahead(sctp, guard):
        return
    error = ErrorChunk()
    error.params.append((SCTP_CAUSE_INVALID_STREAM, pack("!HH", chunk.stream_id, 0)))
    await sctp._send_chunk(error)


async def _receive_forward_tsn_chunk(self: RTCSctpTransport, chunk: ForwardTsnChunk) -> None:
    if _guard(self) is not None:  # aiortc keeps state for every stream named
        chunk.streams = [(s, q) for s, q in chunk.streams if s < self._inbound_streams_max]
    await _orig["_receive_forward_tsn_chunk"](self, chunk)


async def _receive_sack_chunk(self: RTCSctpTransport, chunk: SackChunk) -> None:
    guard = _guard(self)
    if guard is not None:
        if self._association_state == _CLOSED:
            return  # aborted while this packet was read: its timers must stay stopped
        _clip_gaps(self, chunk)
    before = self._last_sacked_tsn
    await _orig["_receive_sack_chunk"](self, chunk)
    if guard is not None and self._last_sacked_tsn != before:
        guard.progress_at = time.monotonic()
        guard.t3_failures = 0


def _clip_gaps(sctp: RTCSctpTransport, chunk: SackChunk) -> None:
    """Gap reports only over what we have outstanding: aiortc walks every TSN a gap
    names, and one SACK packet can name 20 million."""
    outstanding = (sctp._local_tsn - chunk.cumulative_tsn - 1) % 2**32
    if outstanding >= 2**31:  # acknowledges what was never sent: no gap means anything
        chunk.gaps = []
        return
    chunk.gaps = [(a, min(b, outstanding)) for a, b in chunk.gaps if a <= min(b, outstanding)]


async def _transmit(self: RTCSctpTransport) -> None:
    guard = _guard(self)
    if guard is not None and self._association_state == _CLOSED:
        return
    idle = not self._sent_queue
    await _orig["_transmit"](self)
    if guard is None or not self._sent_queue or self._association_state == _CLOSED:
        return
    if idle:  # data outstanding from now on: the stall clock starts
        guard.progress_at = time.monotonic()
    if guard.watchdog is None:
        # cast: aiortc sets _loop in __init__ (pyee's base class types it Optional).
        guard.watchdog = cast(asyncio.AbstractEventLoop, self._loop).call_later(
            guard.limits.stall_seconds, _watch, weakref.ref(self)
        )


def _watch(ref: weakref.ref[RTCSctpTransport]) -> None:
    """Abort a peer whose cumulative acknowledgement has not moved for too long."""
    sctp = ref()
    guard = _guard(sctp) if sctp is not None else None
    if sctp is None or guard is None:
        return
    guard.watchdog = None
    if sctp._association_state == _CLOSED or not sctp._sent_queue:
        return
    waited = time.monotonic() - guard.progress_at
    stall = guard.limits.stall_seconds
    if waited >= stall:
        abort(sctp, f"the peer acknowledged nothing for {waited:.0f} s")
    else:
        loop = cast(asyncio.AbstractEventLoop, sctp._loop)  # see _transmit
        guard.watchdog = loop.call_later(stall - waited, _watch, ref)


def _t3_expired(self: RTCSctpTransport) -> None:
    guard = _guard(self)
    if guard is not None:
        if self._association_state == _CLOSED:
            self._t3_handle = None
            return
        guard.t3_failures += 1
        if guard.t3_failures > guard.limits.max_retransmissions:
            self._t3_handle = None
            abort(self, f"no acknowledgement after {guard.limits.max_retransmissions} retries")
            return
        self._rto = min(self._rto * 2, SCTP_RTO_MAX)  # back off (RFC 4960 6.3.3 E2)
    _orig["_t3_expired"](self)


async def _data_channel_receive(
    self: RTCSctpTransport, stream_id: int, pp_id: int, data: bytes
) -> None:
    if pp_id == WEBRTC_DCEP and data:
        known = stream_id in self._data_channels
        if (data[0] == DCEP_OPEN and known) or (data[0] == DCEP_ACK and not known):
            logger.debug("SCTP: dropped a DCEP message aiortc would fail on")
            return
    try:
        await _orig["_data_channel_receive"](self, stream_id, pp_id, data)
    except UnicodeDecodeError:
        channel = self._data_channels.get(stream_id)
        if pp_id == WEBRTC_STRING and channel is not None:
            channel.emit("message", UndecodableText(data))
        else:
            logger.debug("SCTP: dropped a DCEP message with a label that is not UTF-8")


async def _handle_data(self: RTCSctpTransport, data: bytes) -> None:
    try:
        await _orig["_handle_data"](self, data)
    except Exception as exc:  # peer input aiortc cannot take; else it ends the DTLS transport
        if _guard(self) is None:
            raise
        abort(self, f"malformed SCTP data ({type(exc).__name__})")


_PATCHES: dict[str, tuple[type, Callable[..., Any]]] = {
    "add_chunk": (InboundStream, _add_chunk),
    "pop_messages": (InboundStream, _pop_messages),
    "prune_chunks": (InboundStream, _prune_chunks),
    "_receive_data_chunk": (RTCSctpTransport, _receive_data_chunk),
    "_receive_forward_tsn_chunk": (RTCSctpTransport, _receive_forward_tsn_chunk),
    "_receive_sack_chunk": (RTCSctpTransport, _receive_sack_chunk),
    "_transmit": (RTCSctpTransport, _transmit),
    "_t3_expired": (RTCSctpTransport, _t3_expired),
    "_data_channel_receive": (RTCSctpTransport, _data_channel_receive),
    "_handle_data": (RTCSctpTransport, _handle_data),
}

# What the patch wraps or relies on, with the SHA-256 (16 hex digits) of its aiortc 1.16.0
# source: what these functions do is what the wrappers above assume.
PATCHED = {
    "add_chunk": "de934faf324b1b4b", "pop_messages": "bd29de9aa7c4f8fd",
    "prune_chunks": "ff5a6cd9b68a26fb", "_receive_data_chunk": "790c2bb8cd0f5dd7",
    "_receive_forward_tsn_chunk": "a7b72a09e9c4bb20", "_receive_sack_chunk": "4b35ccf1372cdec8",
    "_transmit": "aa8941d5f8f020e8", "_t3_expired": "0e759bf4b1b2d8c8",
    "_data_channel_receive": "3df88b4b9c662b3b", "_handle_data": "8661b724e20776bb",
    "_mark_received": "2ac68b6a3934ca87", "_send": "f0f8aff63a9a8743",
    "_send_chunk": "eb2f909e3c2ff5cc", "_set_state": "72015aed4aa46827",
    "_data_channel_send": "bff23b8d60ecb624", "_data_channel_flush": "d5f055f33db1abff",
}  # fmt: skip


def drift() -> list[str]:
    """What the patch relies on whose source is not the one it was written against
    (empty: aiortc is as expected)."""
    changed = []
    for name, digest in PATCHED.items():
        owner = InboundStream if name in ("add_chunk", "pop_messages", "prune_chunks") else None
        func = _orig.get(name) or getattr(owner or RTCSctpTransport, name)
        if hashlib.sha256(inspect.getsource(func).encode()).hexdigest()[:16] != digest:
            changed.append(name)
    return changed


def install() -> None:
    """Patch aiortc's SCTP classes (once; later calls do nothing)."""
    if _orig:
        return
    for name, (owner, replacement) in _PATCHES.items():
        _orig[name] = getattr(owner, name)
        setattr(owner, name, replacement)
    counted = cast(type[_CountedStream], InboundStream)  # cast: it is from now on
    counted._parley_bytes = 0
    counted._parley_quiet = False
    changed = drift()
    if changed:
        logger.warning("aiortc changed under server/media/sctp_limits.py: {}", changed)
