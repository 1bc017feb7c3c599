"""A camera for the WebRTC test client: a solid colour at a steady frame rate.

aiortc encodes what it returns (VP8 or H.264) and answers the server's keyframe requests
(RTCP PLI) as a browser does. The colour can change mid-call, so a test can tell a fresh
picture from an old one.
"""

from __future__ import annotations

import asyncio
import fractions
import time

import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError
from av import VideoFrame

CLOCK = 90000  # RTP's video clock


class ColourCamera(MediaStreamTrack):
    """``width`` x ``height`` frames of one colour (RGB), ``fps`` a second."""

    kind = "video"

    def __init__(
        self,
        colour: tuple[int, int, int] = (200, 30, 40),
        width: int = 640,
        height: int = 480,
        fps: float = 15.0,
    ) -> None:
        super().__init__()
        self.width, self.height, self.fps = width, height, fps
        self.frames_sent = 0
        self._start: float | None = None
        self.show(colour)

    def show(self, colour: tuple[int, int, int]) -> None:
        """Send this colour from the next frame on."""
        rgb = np.empty((self.height, self.width, 3), np.uint8)
        rgb[...] = colour
        # Converted once: the encoder wants YUV, and the picture never changes.
        self._yuv = VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
        self.colour = colour

    async def recv(self) -> VideoFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        due = self._start + self.frames_sent / self.fps
        await asyncio.sleep(max(0.0, due - now))
        frame = VideoFrame.from_ndarray(self._yuv.to_ndarray(), format="yuv420p")
        frame.pts = round(self.frames_sent * CLOCK / self.fps)
        frame.time_base = fractions.Fraction(1, CLOCK)
        self.frames_sent += 1
        return frame
