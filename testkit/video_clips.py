"""Encoded video frames for tests, made by aiortc's own encoders (what a peer sends)."""

from __future__ import annotations

import fractions
from collections.abc import Set as AbstractSet

import numpy as np
from aiortc.codecs import depayload, get_encoder
from aiortc.jitterbuffer import JitterFrame
from aiortc.rtcrtpparameters import RTCRtpCodecParameters
from av import VideoFrame

VP8 = RTCRtpCodecParameters(mimeType="video/VP8", clockRate=90000, payloadType=96)
H264 = RTCRtpCodecParameters(mimeType="video/H264", clockRate=90000, payloadType=97)


def solid(colour: tuple[int, int, int], width: int = 640, height: int = 480) -> VideoFrame:
    rgb = np.empty((height, width, 3), np.uint8)
    rgb[...] = colour
    return VideoFrame.from_ndarray(rgb, format="rgb24")


def encoded_frames(
    codec: RTCRtpCodecParameters,
    colours: list[tuple[int, int, int]],
    keyframes: AbstractSet[int] = frozenset({0}),
    size: tuple[int, int] = (640, 480),
) -> list[JitterFrame]:
    """One encoded frame per colour, as the receiver's jitter buffer hands them over
    (depayloaded); the frames at the indexes in ``keyframes`` are forced keyframes."""
    encoder = get_encoder(codec)
    out = []
    for i, colour in enumerate(colours):
        frame = solid(colour, *size)
        frame.pts, frame.time_base = i * 3000, fractions.Fraction(1, 90000)
        payloads, timestamp = encoder.encode(frame, force_keyframe=i in keyframes)
        out.append(JitterFrame(b"".join(depayload(codec, p) for p in payloads), timestamp))
    return out
