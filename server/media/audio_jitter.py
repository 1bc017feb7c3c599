"""Inbound audio packets put in order and handed on the moment they can be: the
receiver's jitter buffer, for audio.

aiortc's :class:`~aiortc.jitterbuffer.JitterBuffer` knows a frame is whole when a packet
with another timestamp follows it, so every audio packet waited for the next one: 20 ms
on every turn end and every barge-in. And it never gives up on a lost packet: it waits
until its 16 slots are full, then hands on one frame per packet that arrives, so a single
lost packet left the audio 14 packets (280 ms) behind for the rest of the call
(tests/test_audio_jitter.py replays both). An audio RTP packet is a whole frame (Opus and
G.711 are never split across packets), so here a packet goes on as soon as it is next in
sequence. A gap waits for at most ``hold`` packets after it (one that was only
reordered); then the missing ones are taken as lost, and the next packet goes on saying
how many were lost before it, so that the decoder can conceal them
(:mod:`server.media.inbound_audio`). A packet behind the sequence (late, or a duplicate)
is dropped and counted; a jump of more than ``MAX_GAP`` restarts the sequence (a new
source, not a loss).

The receiver calls :meth:`AudioJitter.add` with each RTP packet (its payload in
``_data``) and, for what it returns, maps the timestamp and queues it for decoding.
"""

from __future__ import annotations

from typing import Any

from aiortc import RTCRtpReceiver

MAX_GAP = 100  # packets (2 s at 20 ms): a longer jump is a new sequence, not a loss
_SEQ = 0x10000
_HALF = 0x8000

_JITTER = "_RTCRtpReceiver__jitter_buffer"  # aiortc 1.16's name for the receiver's buffer


class Released:
    """The packets handed on at once: ``(payload, packets lost just before it)`` in order;
    ``timestamp`` is the first one's (the receiver maps it to its own clock)."""

    __slots__ = ("packets", "timestamp")

    def __init__(self, timestamp: int, packets: list[tuple[bytes, int]]) -> None:
        self.timestamp = timestamp
        self.packets = packets


class AudioJitter:
    """One receiver's audio packets in sequence order (see the module docstring)."""

    def __init__(self, hold: int = 0) -> None:
        if hold < 0:
            raise ValueError("hold must be 0 or more")
        self.hold = hold
        self.lost = 0  # packets never received, skipped
        self.late = 0  # packets received behind the sequence, dropped
        self._next: int | None = None  # the sequence number expected next
        self._held: dict[int, Any] = {}  # packets ahead of a gap, by sequence number

    def add(self, packet: Any) -> tuple[bool, Released | None]:
        """Take one RTP packet; what can be handed on now, if anything (and ``False``:
        aiortc's receiver reads the first item as "send a picture loss indication")."""
        seq = packet.sequence_number
        if self._next is None:
            self._next = seq
        ahead = (seq - self._next) % _SEQ
        if ahead >= _HALF or seq in self._held:
            self.late += 1
            return False, None
        if ahead > MAX_GAP:
            self._held.clear()
            self._next, ahead = seq, 0
        if ahead == 0 and not self._held:  # the usual case: next in order
            self._next = (seq + 1) % _SEQ
            return False, Released(packet.timestamp, [(packet._data, 0)])
        self._held[seq] = packet
        return False, self._release()

    def _release(self) -> Released | None:
        """What is in order from the expected packet on, skipping a gap that has waited
        for ``hold`` packets after it."""
        out: list[tuple[bytes, int]] = []
        timestamp = 0
        lost = 0
        while self._held:
            assert self._next is not None
            packet = self._held.pop(self._next, None)
            if packet is None:
                if len(self._held) <= self.hold:
                    break  # the gap may still fill
                expected = self._next
                nearest = min(self._held, key=lambda s: (s - expected) % _SEQ)
                gap = (nearest - expected) % _SEQ
                lost += gap
                self.lost += gap
                self._next = nearest
                continue
            if not out:
                timestamp = packet.timestamp
            out.append((packet._data, lost))
            lost = 0
            self._next = (self._next + 1) % _SEQ
        return Released(timestamp, out) if out else None

    def skip(self, packet: Any) -> None:
        """``packet`` was dropped before reaching the buffer (over the session's packet
        budget): the sequence goes past it, and it is no loss."""
        if packet.sequence_number == self._next:
            self._next = (packet.sequence_number + 1) % _SEQ

    @classmethod
    def of(cls, receiver: RTCRtpReceiver) -> AudioJitter | None:
        """The receiver's, once installed."""
        current = getattr(receiver, _JITTER, None)
        return current if isinstance(current, cls) else None

    @classmethod
    def install(cls, receiver: RTCRtpReceiver, hold: int) -> AudioJitter:
        """Make ``receiver`` use one (before media flows; a renegotiation keeps the one it
        has, and the packets in it)."""
        current = getattr(receiver, _JITTER)
        if isinstance(current, cls):
            current.hold = hold
            return current
        jitter = cls(hold)
        setattr(receiver, _JITTER, jitter)
        return jitter
