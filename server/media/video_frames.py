"""One still picture from a WebRTC video track: find keyframes, decode one, make a JPEG.

A video track only needs decoding when the agent looks. Inter frames depend on every
frame since the last keyframe, so decoding "the latest frame" would mean decoding them
all; a keyframe stands alone. :func:`is_keyframe` reads the codec's own header bytes
(cheap, no decoding), :class:`KeyframeDecoder` decodes one keyframe (and nothing else)
into a JPEG whose long side is at most ``max_side`` pixels.

What aiortc hands over (its jitter buffer's frames, depayloaded): VP8 frames as they
are, H.264 access units in Annex-B form (start codes before each NAL unit).
"""

from __future__ import annotations

import fractions
from dataclasses import dataclass
from typing import Literal

import av
from av.video.frame import VideoFrame

# VP8 (RFC 6386, 9.1): bit 0 of the frame tag is 0 on a keyframe, which carries the
# start code 9d 01 2a in bytes 3..5.
_VP8_START_CODE = b"\x9d\x01\x2a"
# H.264 NAL unit types: an IDR slice is a keyframe.
_H264_IDR = 5
# FFmpeg's decoders for the codecs aiortc negotiates.
_DECODERS: dict[str, Literal["vp8", "h264"]] = {"vp8": "vp8", "h264": "h264"}
# MJPEG quantiser (2 best .. 31 worst): 6 keeps text on a shared screen readable at
# about a tenth of the bytes of the best quality.
_JPEG_QUALITY = "6"


def is_keyframe(codec: str, data: bytes) -> bool:
    """Whether ``data`` (one encoded frame of ``codec``: ``"VP8"`` or ``"H264"``) is a
    keyframe, from its header bytes."""
    name = codec.lower()
    if name == "vp8":
        return len(data) >= 10 and not data[0] & 0x01 and data[3:6] == _VP8_START_CODE
    if name == "h264":
        return _H264_IDR in _h264_nal_types(data)
    return False


def _h264_nal_types(data: bytes) -> set[int]:
    types: set[int] = set()
    start = data.find(b"\x00\x00\x01")
    while start != -1 and start + 3 < len(data):
        types.add(data[start + 3] & 0x1F)
        start = data.find(b"\x00\x00\x01", start + 3)
    return types


@dataclass(frozen=True, slots=True)
class Still:
    """A decoded keyframe as a JPEG, and its size in pixels."""

    jpeg: bytes
    width: int
    height: int


def scaled_size(width: int, height: int, max_side: int) -> tuple[int, int]:
    """``width`` x ``height`` shrunk (never enlarged) so the long side is at most
    ``max_side``; even numbers, as 4:2:0 JPEG wants."""
    scale = min(1.0, max_side / max(width, height, 1))
    return max(2, round(width * scale) // 2 * 2), max(2, round(height * scale) // 2 * 2)


def to_jpeg(frame: VideoFrame, max_side: int) -> Still:
    """``frame`` scaled to at most ``max_side`` on its long side, as a JPEG."""
    width, height = scaled_size(frame.width, frame.height, max_side)
    small = frame.reformat(width=width, height=height, format="yuvj420p", interpolation="AREA")
    encoder = av.CodecContext.create("mjpeg", "w")
    encoder.width, encoder.height = width, height
    encoder.pix_fmt = "yuvj420p"
    encoder.time_base = fractions.Fraction(1, 1)
    encoder.options = {"qmin": _JPEG_QUALITY, "qmax": _JPEG_QUALITY}
    jpeg = b"".join(bytes(p) for p in [*encoder.encode(small), *encoder.encode(None)])
    return Still(jpeg, width, height)


class KeyframeDecoder:
    """Decodes single keyframes of one track. Not thread-safe: one caller at a time
    (the intake runs it in one worker thread)."""

    def __init__(self) -> None:
        self._codecs: dict[str, av.VideoCodecContext] = {}

    def decode(self, codec: str, data: bytes, max_side: int) -> Still | None:
        """The picture of the keyframe ``data``, or None if it does not decode."""
        name = _DECODERS.get(codec.lower())
        if name is None:
            return None
        context = self._codecs.get(name)
        if context is None:
            context = self._codecs[name] = av.CodecContext.create(name, "r")
        try:
            frames = context.decode(av.Packet(data))
        except av.FFmpegError:
            return None
        pictures = [f for f in frames if isinstance(f, VideoFrame)]
        return to_jpeg(pictures[-1], max_side) if pictures else None
