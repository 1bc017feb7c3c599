"""The agent's eyes: ``look_at_camera`` and ``look_at_screen``, bound to one call's video.

The LLM decides when to look. A look asks the call's :class:`FrameSource` (the server's
video intake) for a current picture of the shared camera or screen, and returns it as an
:class:`~pipeline.vision.image_results.ImageResult`: the LLM reads where it came from and how
old it is in the tool's result, and sees the picture in the message after it. A source
the user is not sharing gives an error result the LLM can talk about ("turn on your
camera"), never an exception.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline.tools.registry import ToolSpec
from pipeline.tools.runner import error_result
from pipeline.vision.image_results import ImageResult

CAMERA = "camera"
SCREEN = "screen"
# Seconds a look may take: waiting for a fresh keyframe (about one round trip), decoding it.
LOOK_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class CapturedFrame:
    """One picture from a video source, JPEG-encoded and sized for the LLM."""

    jpeg: bytes
    width: int
    height: int
    source: str  # CAMERA or SCREEN
    captured_at: float  # time.monotonic() when its video frame arrived

    def age(self, now: float | None = None) -> float:
        """Seconds since the picture arrived."""
        return (time.monotonic() if now is None else now) - self.captured_at


class FrameSource(Protocol):
    """A call's shared video, as the agent sees it (``server.media.video_intake.VideoIntake``)."""

    def live_sources(self) -> list[str]:
        """The sources sending video now (``"camera"``, ``"screen"``)."""
        ...

    def latest(self, source: str) -> CapturedFrame | None:
        """The newest picture already decoded, without waiting (None: none yet)."""
        ...

    async def capture(self, source: str) -> CapturedFrame | None:
        """A current picture: the newest if it is recent, else a fresh one (None: the
        source sent none in time)."""
        ...

    def refresh(self) -> None:
        """Ask the live sources for a fresh picture, to be ready soon; returns at once."""
        ...


def _not_shared(source: str) -> dict[str, str]:
    what = "their camera" if source == CAMERA else "their screen"
    return error_result(f"the user is not sharing {what} right now")


async def look(frames: FrameSource, source: str) -> ImageResult | dict[str, Any]:
    """What ``source`` shows now, as an image result (or an error result)."""
    if source not in frames.live_sources():
        return _not_shared(source)
    frame = await frames.capture(source)
    if frame is None:
        return error_result(f"no picture came from the user's {source}; try again")
    facts = {
        "source": source,
        "seconds_old": round(frame.age(), 1),
        "width": frame.width,
        "height": frame.height,
    }
    return ImageResult(frame.jpeg, facts)


def vision_tools(frames: FrameSource) -> list[ToolSpec]:
    """``look_at_camera`` and ``look_at_screen``, bound to ``frames``."""

    async def look_at_camera() -> ImageResult | dict[str, Any]:
        """Look through the user's camera: you get what it shows right now as an image.
        Use it when the user asks what you see, shows you something or asks about
        themselves or their surroundings."""
        return await look(frames, CAMERA)

    async def look_at_screen() -> ImageResult | dict[str, Any]:
        """Look at the screen the user shares: you get what it shows right now as an
        image. Use it when the user asks about something on their screen."""
        return await look(frames, SCREEN)

    return [
        ToolSpec.from_function(look_at_camera, timeout=LOOK_TIMEOUT),
        ToolSpec.from_function(look_at_screen, timeout=LOOK_TIMEOUT),
    ]
