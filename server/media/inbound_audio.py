"""Inbound audio: from a receiver's encoded frames to 16 kHz mono s16, as it is decoded.

aiortc decodes every audio frame in a thread per receiver, at 48 kHz stereo, and hands
it back through ``run_coroutine_threadsafe`` (a task and two futures per 20 ms). Decoding
one mono 20 ms frame costs less than that hop. So :class:`InboundAudio` stands in for the
receiver's decoder queue and decodes on the event loop, in mono, as frames leave the
jitter buffer, then resamples to 16 kHz (ffmpeg's libopus always decodes at 48 kHz); the
receiver's decoder thread is told to end at once.

Both hooks use aiortc's private names; aiortc is pinned and tests check them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiortc import RTCRtpReceiver
from aiortc.codecs import get_decoder
from aiortc.jitterbuffer import JitterBuffer
from av import CodecContext, Packet
from loguru import logger

from pipeline.resampling import StreamResampler

RATE = 16000

_JITTER = "_RTCRtpReceiver__jitter_buffer"
_QUEUE = "_RTCRtpReceiver__decoder_queue"
_THREAD = "_RTCRtpReceiver__decoder_thread"


def set_jitter_prefetch(receiver: RTCRtpReceiver, frames: int) -> None:
    """Make an audio receiver hold ``frames`` packets (20 ms each) before decoding.

    aiortc holds 4 (80 ms) and has no option for it: on a steady link that is pure
    latency on every user turn. Call before media flows (packets held are dropped).
    """
    current = getattr(receiver, _JITTER)
    if current._prefetch != frames:
        setattr(receiver, _JITTER, JitterBuffer(capacity=current.capacity, prefetch=frames))


class InboundAudio:
    """Decodes one receiver's audio on the event loop and calls ``on_frame`` with the
    16 kHz mono s16 it yields, in order, as soon as it is decoded: about 20 ms a packet.

    The chunks are not cut to a fixed size on purpose: the resampler holds back a few
    samples, so fixed 20 ms frames would each wait for the next packet, 20 ms of latency
    on every turn and every barge-in. Consumers (VAD, transcriber) take any length.

    ``put`` runs inside aiortc's DTLS receive loop, which an exception ends (and the call
    with it). So nothing raises out of it: a frame that fails to decode is dropped and
    counted, and what ``on_frame`` raises goes to ``on_error`` (logged when unset)."""

    def __init__(
        self,
        on_frame: Callable[[bytes], None],
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.on_frame = on_frame
        self.on_error = on_error
        self.decode_errors = 0
        self._opus = CodecContext.create("libopus", "r")
        self._opus.format = "s16"
        self._opus.layout = "mono"
        self._opus.sample_rate = 48000
        self._other: Any = None  # aiortc's decoder of another codec (G.711), if chosen
        self._resampler = StreamResampler(RATE)

    def attach(self, receiver: RTCRtpReceiver) -> None:
        """Take over decoding for ``receiver`` (before or after it has started)."""
        thread = getattr(receiver, _THREAD)
        if thread is not None:  # already started: end its thread through its own queue
            getattr(receiver, _QUEUE).put(None)
        setattr(receiver, _QUEUE, self)

    # The two calls aiortc makes on its decoder queue.

    def put(self, item: tuple[Any, Any] | None) -> None:
        """An encoded frame ``(codec, JitterFrame)`` from the receiver, or None at stop."""
        if item is None:
            return
        codec, encoded = item
        try:
            if codec.name == "opus":
                decoded = self._opus.decode(Packet(encoded.data))
            else:
                self._other = self._other or get_decoder(codec)
                decoded = self._other.decode(encoded)
            chunks = [pcm for frame in decoded for pcm in self._resampler.resample_frame(frame)]
        except Exception as exc:  # FFmpeg's errors, or a codec aiortc cannot decode
            self.decode_errors += 1
            if self.decode_errors == 1:
                logger.warning("inbound audio: a frame failed to decode: {!r}", exc)
            return
        for pcm in chunks:
            try:
                self.on_frame(pcm)
            except Exception as exc:
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        if self.on_error is None:
            logger.opt(exception=exc).error("inbound audio: the frame handler failed")
        else:
            self.on_error(exc)

    def get(self) -> None:
        """What the receiver's decoder thread asks for first: None, so it ends."""
        return None
