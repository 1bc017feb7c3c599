"""Inbound video (the client's camera and shared screen): received, but decoded only when
the agent looks, one keyframe at a time.

aiortc decodes every frame of a video track in a thread per receiver (a 640x480 VP8
camera at 30 fps is ~30 decodes a second, for pictures nobody looks at). Here, as
:mod:`server.media.inbound_audio` does for audio, :class:`TrackIntake` stands in for the
receiver's decoder queue and its thread is told to end: encoded frames are only counted
and their headers read. A picture is wanted when a tool looks, when a user turn starts
(with ``PARLEY_VISION_EVERY_TURN``) and for the first keyframe of a track. Then the
sender is asked for a keyframe (RTCP PLI, what a receiver sends after losing a picture),
and that keyframe alone is decoded, scaled and JPEG-encoded in a worker thread shared by
every call (so pictures never pile up on the CPUs). At most one keyframe a second is
asked for per source (a fresher picture is reused), so an idle track costs the RTP path
only (measured in ``bench/video_intake.py``).

Video transceivers are named by their order in the offer: the first is the camera, the
second the shared screen (Pipecat's client: mid 1 and mid 2). More are not accepted.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from aiortc import RTCRtpReceiver
from loguru import logger

from pipeline.task_cancel import cancel_and_wait
from pipeline.vision.tools import CAMERA, SCREEN, CapturedFrame
from server.media.video_frames import KeyframeDecoder, Still, is_keyframe

SOURCES = (CAMERA, SCREEN)
# A source that sent no frame for this long is not live (camera off, track ended).
LIVE_SECONDS = 2.0
# A picture younger than this is current: at most about one decode a second per source.
FRESH_SECONDS = 1.0
# Least time between two keyframe requests to one source.
PLI_INTERVAL = 0.5
# How long a look waits for the keyframe it asked for (a round trip and a frame or two).
CAPTURE_TIMEOUT = 2.0

# aiortc's private names (aiortc is pinned; tests/test_video_intake.py checks them).
_QUEUE = "_RTCRtpReceiver__decoder_queue"
_THREAD = "_RTCRtpReceiver__decoder_thread"

# One thread decodes every call's pictures: a decode is 5 to 50 ms, and a burst of looks
# must not take more than one core from the calls' audio.
_decoder_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="video-still")


class TrackIntake:
    """One video receiver: frames counted, a keyframe decoded when a picture is wanted.

    Stands in for the receiver's decoder queue (``put``/``get``), which aiortc calls on
    the event loop; ``put`` never raises into aiortc."""

    def __init__(self, source: str, receiver: RTCRtpReceiver, max_side: int) -> None:
        self.source = source
        # Weak: the receiver holds this object (its decoder queue); a strong reference back
        # would make a cycle that keeps a closed call's receiver until a full collection.
        self._receiver = weakref.ref(receiver)
        self.max_side = max_side
        self.latest: CapturedFrame | None = None
        self.frames = 0  # encoded frames received
        self.keyframes = 0
        self.decoded = 0
        self.decode_errors = 0
        self.last_frame_at = 0.0
        self._decoder = KeyframeDecoder()
        self._wanted = False
        self._decoding = False
        self._last_pli = 0.0
        self._waiters: list[asyncio.Future[CapturedFrame | None]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def receiver(self) -> RTCRtpReceiver | None:
        return self._receiver()

    def attach(self) -> None:
        """Take over the receiver's decoding (before or after it has started)."""
        receiver = self.receiver
        assert receiver is not None
        thread = getattr(receiver, _THREAD)
        if thread is not None:  # already started: end its thread through its own queue
            getattr(receiver, _QUEUE).put(None)
        setattr(receiver, _QUEUE, self)

    @property
    def live(self) -> bool:
        return self.frames > 0 and time.monotonic() - self.last_frame_at < LIVE_SECONDS

    # -- the two calls aiortc makes on its decoder queue --------------------------------

    def put(self, item: tuple[Any, Any] | None) -> None:
        """An encoded frame ``(codec, JitterFrame)`` from the receiver, or None at stop."""
        if item is None:
            return
        codec, encoded = item
        now = time.monotonic()
        self.frames += 1
        self.last_frame_at = now
        if not is_keyframe(codec.name, encoded.data):
            return
        self.keyframes += 1
        if self._decoding or not (self._wanted or self.latest is None):
            return
        self._wanted = False
        self._decoding = True
        job = _decoder_thread.submit(
            self._decoder.decode, codec.name, bytes(encoded.data), self.max_side
        )
        loop = asyncio.get_running_loop()

        def back_on_the_loop(done: Future[Still | None]) -> None:
            try:
                loop.call_soon_threadsafe(self._decoded, done, now)
            except RuntimeError:  # the loop closed meanwhile (server stopped)
                pass

        job.add_done_callback(back_on_the_loop)

    def get(self) -> None:
        """What the receiver's decoder thread asks for first: None, so it ends."""
        return None

    # -- pictures -----------------------------------------------------------------------

    def _decoded(self, job: Future[Still | None], arrived: float) -> None:
        self._decoding = False
        try:
            still = job.result()
        except Exception as exc:  # FFmpeg or a broken frame: the next keyframe may do
            logger.opt(exception=exc).warning("video: decoding a {} keyframe failed", self.source)
            still = None
        if still is None:
            self.decode_errors += 1
            if self._waiters:
                self.request()  # someone is still looking: ask for another
            return
        self.decoded += 1
        self.latest = CapturedFrame(still.jpeg, still.width, still.height, self.source, arrived)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(self.latest)
        self._waiters.clear()

    def request(self) -> None:
        """Want the next keyframe, and ask the sender for one (at most every 0.5 s)."""
        self._wanted = True
        now = time.monotonic()
        if now - self._last_pli >= PLI_INTERVAL:
            self._last_pli = now
            task = asyncio.get_running_loop().create_task(self._send_pli(), name="video-pli")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send_pli(self) -> None:
        receiver = self.receiver
        if receiver is None:
            return
        try:
            for source in receiver.getSynchronizationSources():
                await receiver._send_rtcp_pli(source.source)
        except Exception as exc:  # the transport is closing: the look times out instead
            logger.debug("video: a keyframe request failed: {!r}", exc)

    async def capture(self, wait: float = CAPTURE_TIMEOUT) -> CapturedFrame | None:
        """A current picture: the newest if under a second old, else the keyframe asked
        for now (after ``wait`` seconds without it: the newest there is, maybe None)."""
        latest = self.latest
        if latest is not None and latest.age() <= FRESH_SECONDS:
            return latest
        waiter: asyncio.Future[CapturedFrame | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.request()
        try:
            return await asyncio.wait_for(waiter, wait)
        except TimeoutError:
            return self.latest
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def refresh(self) -> None:
        """Have a fresh picture ready soon, unless the newest is fresh already."""
        latest = self.latest
        if self.live and (latest is None or latest.age() > FRESH_SECONDS):
            self.request()

    async def close(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        await cancel_and_wait(self._tasks)

    def info(self) -> dict[str, Any]:
        latest = self.latest
        return {
            "live": self.live,
            "frames": self.frames,
            "keyframes": self.keyframes,
            "decoded": self.decoded,
            "decode_errors": self.decode_errors,
            "latest": None
            if latest is None
            else {"width": latest.width, "height": latest.height, "age": round(latest.age(), 2)},
        }


class VideoIntake:
    """A call's video sources, as the agent sees them (a :class:`FrameSource`)."""

    def __init__(self, max_side: int = 512) -> None:
        self.max_side = max_side
        self.tracks: dict[str, TrackIntake] = {}

    def attach(self, receiver: RTCRtpReceiver) -> bool:
        """Receive this video receiver's track as the next source; False when both
        sources are taken (answer that transceiver inactive)."""
        if any(track.receiver is receiver for track in self.tracks.values()):
            return True
        if len(self.tracks) == len(SOURCES):
            return False
        source = SOURCES[len(self.tracks)]
        track = self.tracks[source] = TrackIntake(source, receiver, self.max_side)
        track.attach()
        return True

    def live_sources(self) -> list[str]:
        return [source for source, track in self.tracks.items() if track.live]

    def latest(self, source: str) -> CapturedFrame | None:
        track = self.tracks.get(source)
        return track.latest if track is not None else None

    async def capture(self, source: str) -> CapturedFrame | None:
        track = self.tracks.get(source)
        return await track.capture() if track is not None else None

    def refresh(self) -> None:
        for track in self.tracks.values():
            track.refresh()

    async def close(self) -> None:
        await asyncio.gather(*(track.close() for track in self.tracks.values()))

    def info(self) -> dict[str, Any]:
        return {source: track.info() for source, track in self.tracks.items()}
