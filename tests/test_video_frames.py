"""Keyframes found by their header bytes, decoded alone, as bounded JPEGs
(server/media/video_frames.py), on frames made by aiortc's own VP8 and H.264 encoders."""

from __future__ import annotations

import av
import numpy as np
import pytest
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

from server.media.video_frames import KeyframeDecoder, is_keyframe, scaled_size
from testkit.video_clips import H264, VP8, encoded_frames

RED = (200, 30, 40)


def colour_of(jpeg: bytes) -> np.ndarray:
    frame = av.CodecContext.create("mjpeg", "r").decode(av.Packet(jpeg))[0]
    return frame.to_ndarray(format="rgb24").reshape(-1, 3).mean(axis=0)


@pytest.mark.parametrize("codec", [VP8, H264], ids=["vp8", "h264"])
def test_only_keyframes_are_keyframes(codec: RTCRtpCodecParameters) -> None:
    frames = encoded_frames(codec, [RED] * 6, keyframes={0, 4})
    assert [is_keyframe(codec.name, f.data) for f in frames] == [
        True, False, False, False, True, False,
    ]  # fmt: skip


def test_garbage_and_unknown_codecs_are_no_keyframes() -> None:
    assert not is_keyframe("VP8", b"")
    assert not is_keyframe("VP8", b"\x00" * 20)  # bit 0 clear, but no start code
    assert not is_keyframe("H264", b"\x00\x00\x01\x41" + b"\x00" * 20)  # a non-IDR slice
    assert not is_keyframe("VP9", encoded_frames(VP8, [RED])[0].data)


@pytest.mark.parametrize("codec", [VP8, H264], ids=["vp8", "h264"])
def test_a_keyframe_alone_decodes_to_a_bounded_jpeg(codec: RTCRtpCodecParameters) -> None:
    [keyframe] = encoded_frames(codec, [RED])
    still = KeyframeDecoder().decode(codec.name, keyframe.data, max_side=512)
    assert still is not None
    assert (still.width, still.height) == (512, 384)
    assert still.jpeg.startswith(b"\xff\xd8\xff")
    assert np.all(np.abs(colour_of(still.jpeg) - RED) < 12)


def test_a_frame_that_does_not_decode_gives_none() -> None:
    decoder = KeyframeDecoder()
    assert decoder.decode("VP8", b"\x10\x02\x00\x9d\x01\x2a" + b"\xff" * 40, 512) is None
    assert decoder.decode("VP9", b"anything", 512) is None


def test_pictures_shrink_to_the_long_side_and_never_grow() -> None:
    assert scaled_size(1920, 1080, 512) == (512, 288)
    assert scaled_size(1080, 1920, 512) == (288, 512)
    assert scaled_size(320, 240, 512) == (320, 240)
    assert scaled_size(641, 481, 512) == (512, 384)
