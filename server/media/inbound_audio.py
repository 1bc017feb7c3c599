"""Inbound audio: from a receiver's encoded frames to 16 kHz mono s16, as it is decoded.

aiortc decodes every audio frame in a thread per receiver, at 48 kHz stereo, and hands
it back through ``run_coroutine_threadsafe`` (a task and two futures per 20 ms). Decoding
one mono 20 ms frame costs less than that hop. So :class:`InboundAudio` stands in for the
receiver's decoder queue and decodes on the event loop, in mono, as frames leave the
jitter buffer; Opus through libopus (:mod:`server.media.libopus`) straight at 16 kHz,
another codec through aiortc's decoder, then a resample to 16 kHz. The receiver's decoder thread is
told to end at once. Its jitter buffer gives way to :class:`~server.media.audio_jitter.AudioJitter`,
which hands each packet on as it comes and says how many were lost before it: a lost Opus
packet is concealed (from the next one's FEC, or extrapolated) so that the audio keeps
time, up to ``MAX_CONCEALED`` in a row; a longer outage is left out.

Before any of that, a session's :class:`PacketGate` caps the audio packets its receivers
take in: every packet admitted is decoded, echo-cancelled and fed to the VAD on the event
loop, so a client sending 2,500 packets a second (50 is a 20 ms Opus stream) would take
the loop for itself. The gate wraps each receiver's ``_handle_rtp_packet`` (what aiortc's
DTLS transport calls with every authenticated, parsed RTP packet), so the excess is
dropped before the bitrate estimator, the jitter buffer and the decoder see it: a
dropped packet costs a clock read. Upstream would need a per-receiver packet budget (or a
hook before the jitter buffer); aiortc 1.16 has neither.

The hooks use aiortc's private names; aiortc is pinned and tests check them
(tests/test_inbound_audio.py, tests/test_inbound_rate.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aiortc import RTCRtpReceiver
from aiortc.codecs import get_decoder
from aiortc.jitterbuffer import JitterFrame
from loguru import logger

from pipeline.audio.resampling import StreamResampler
from server.guards.rate_limit import Clock, TokenBucket
from server.media.audio_jitter import AudioJitter
from server.media.libopus import Decoder

RATE = 16000
# The most lost packets in a row concealed (100 ms at 20 ms): a longer gap is an outage,
# and extrapolating speech through it would invent some, so it is left out.
MAX_CONCEALED = 5

_QUEUE = "_RTCRtpReceiver__decoder_queue"
_THREAD = "_RTCRtpReceiver__decoder_thread"
_HANDLE_RTP = "_handle_rtp_packet"  # what RTCDtlsTransport calls with each RTP packet


class PacketGate:
    """The inbound audio packets one session may take in: ``rate`` a second on average,
    ``burst`` at once (a token bucket shared by all its audio receivers: they all feed the
    one voice pipeline, so a second audio track must not double the budget).

    A packet over the budget is dropped and counted; the first drop calls ``on_flood``
    with what to tell the client (once per session: a flood is a stream of drops), and
    every drop ``on_drop`` (a metric's ``inc``) when set."""

    __slots__ = ("_bucket", "dropped", "on_drop", "on_flood", "rate")

    def __init__(
        self,
        rate: float,
        burst: int,
        on_flood: Callable[[str], None] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.rate = rate
        self._bucket = TokenBucket(rate, burst, clock)
        self.dropped = 0
        self.on_flood = on_flood
        self.on_drop: Callable[[], None] | None = None

    def admit(self) -> bool:
        """Whether one more packet may go on; counts it when it may not."""
        if self._bucket.take() == 0.0:
            return True
        self.dropped += 1
        if self.on_drop is not None:
            self.on_drop()
        if self.dropped == 1 and self.on_flood is not None:
            error = (
                f"audio packets arrive faster than {self.rate:g} a second: the excess is "
                "dropped (20 ms audio is 50 a second)"
            )
            try:  # this runs in aiortc's DTLS receive loop, which an exception would end
                self.on_flood(error)
            except Exception as exc:
                logger.opt(exception=exc).warning("inbound audio: telling of a flood failed")
        return False

    def guard(self, receiver: RTCRtpReceiver) -> None:
        """Make ``receiver`` drop the packets over the budget before handling them (once)."""
        handle = getattr(receiver, _HANDLE_RTP)
        if getattr(handle, "packet_gate", None) is not None:
            return

        async def gated(packet: Any, arrival_time_ms: int) -> None:
            if self.admit():
                await handle(packet, arrival_time_ms=arrival_time_ms)
            elif (jitter := AudioJitter.of(receiver)) is not None:
                jitter.skip(packet)  # dropped here, not lost on the way: nothing to conceal

        gated.packet_gate = self  # type: ignore[attr-defined]  # a mark guard() looks for
        setattr(receiver, _HANDLE_RTP, gated)


class InboundAudio:
    """Decodes one receiver's audio on the event loop and calls ``on_frame`` with the
    16 kHz mono s16 it yields, in order, as soon as it is decoded: about 20 ms a packet.

    The chunks are not cut to a fixed size on purpose: a resampler holds back a few
    samples, so fixed 20 ms frames would each wait for the next packet, 20 ms of latency
    on every turn and every barge-in. Consumers (VAD, transcriber) take any length.

    With a ``gate``, packets over the session's budget are dropped before the jitter
    buffer (see :class:`PacketGate`). ``hold``: how many packets a gap in the sequence
    waits for before it is taken as lost (:class:`~server.media.audio_jitter.AudioJitter`).

    ``put`` runs inside aiortc's DTLS receive loop, which an exception ends (and the call
    with it). So nothing raises out of it: a frame that fails to decode is dropped and
    counted, and what ``on_frame`` raises goes to ``on_error`` (logged when unset)."""

    def __init__(
        self,
        on_frame: Callable[[bytes], None],
        on_error: Callable[[Exception], None] | None = None,
        gate: PacketGate | None = None,
        hold: int = 0,
    ) -> None:
        self.on_frame = on_frame
        self.on_error = on_error
        self.decode_errors = 0
        self.concealed = 0  # lost packets filled in
        self.jitter = AudioJitter(hold)
        # Opus straight at 16 kHz: libopus band-limits inside the decoder, and decoding
        # then resampling (PyAV) was ~16 % of the server's CPU at 20 calls. It was once
        # suspected of losing a caller's first syllables under the greeting; offline
        # (bench/greeting_onset.py) the VAD hears the caller through the canceller as
        # early either way.
        self._opus = Decoder(RATE)
        self._other: Any = None  # aiortc's decoder of another codec (G.711), if chosen
        self._resampler = StreamResampler(RATE)
        self._gate = gate

    def attach(self, receiver: RTCRtpReceiver) -> None:
        """Take over decoding for ``receiver`` (before or after it has started), behind
        the packet gate when there is one."""
        if self._gate is not None:
            self._gate.guard(receiver)
        self.jitter = AudioJitter.install(receiver, self.jitter.hold)
        thread = getattr(receiver, _THREAD)
        if thread is not None:  # already started: end its thread through its own queue
            getattr(receiver, _QUEUE).put(None)
        setattr(receiver, _QUEUE, self)

    # The two calls aiortc makes on its decoder queue.

    def put(self, item: tuple[Any, Any] | None) -> None:
        """Encoded audio ``(codec, frame)`` from the receiver (a
        :class:`~server.media.audio_jitter.Released` or one ``JitterFrame``), or None at
        stop."""
        if item is None:
            return
        codec, encoded = item
        packets = getattr(encoded, "packets", None) or [(encoded.data, 0)]
        for data, lost in packets:
            try:
                chunks = self._decode(codec, data, lost, encoded.timestamp)
            except Exception as exc:  # FFmpeg's errors, or a codec aiortc cannot decode
                self.decode_errors += 1
                if self.decode_errors == 1:
                    logger.warning("inbound audio: a frame failed to decode: {!r}", exc)
                continue
            for pcm in chunks:
                try:
                    self.on_frame(pcm)
                except Exception as exc:
                    self._failed(exc)

    def _decode(self, codec: Any, data: bytes, lost: int, timestamp: int) -> list[bytes]:
        if codec.name == "opus":
            if not 0 < lost <= MAX_CONCEALED:
                return [self._opus.decode(data)]
            filled = self._opus.conceal(lost, data)
            self.concealed += lost
            return [filled + self._opus.decode(data)]  # one chunk: the audio keeps time
        self._other = self._other or get_decoder(codec)
        decoded = self._other.decode(JitterFrame(data, timestamp))
        return [pcm for f in decoded for pcm in self._resampler.resample_frame(f)]

    def _failed(self, exc: Exception) -> None:
        if self.on_error is None:
            logger.opt(exception=exc).error("inbound audio: the frame handler failed")
        else:
            self.on_error(exc)

    def get(self) -> None:
        """What the receiver's decoder thread asks for first: None, so it ends."""
        return None
