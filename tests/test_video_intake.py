"""The video intake (server/media/video_intake.py) on a real aiortc receiver, fed the encoded
frames aiortc's jitter buffer hands over: frames are counted, not decoded; a keyframe is
decoded only when a picture is wanted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiortc import RTCPeerConnection

from server.media.video_intake import TrackIntake, VideoIntake
from testkit.video_clips import VP8, encoded_frames

RED, BLUE = (200, 30, 40), (40, 50, 210)


@pytest.fixture
async def pc() -> AsyncIterator[RTCPeerConnection]:
    connection = RTCPeerConnection()
    yield connection
    await connection.close()


async def decoded(track: TrackIntake) -> None:
    """Until the worker thread's decode is back on the loop."""
    for _ in range(200):
        if not track._decoding:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the keyframe was never decoded")


async def test_attach_takes_over_the_receivers_queue(pc: RTCPeerConnection) -> None:
    receiver = pc.addTransceiver("video").receiver
    intake = VideoIntake()
    assert intake.attach(receiver)
    track = intake.tracks["camera"]
    assert receiver._RTCRtpReceiver__decoder_queue is track  # aiortc 1.16's names
    assert receiver._RTCRtpReceiver__decoder_thread is None  # not started yet
    assert callable(receiver._send_rtcp_pli)  # how a keyframe is asked for
    assert track.get() is None, "the decoder thread is told to end at once"
    assert intake.attach(receiver), "a renegotiation keeps the same source"
    assert list(intake.tracks) == ["camera"]


async def test_a_third_video_track_is_refused(pc: RTCPeerConnection) -> None:
    intake = VideoIntake()
    receivers = [pc.addTransceiver("video").receiver for _ in range(3)]
    assert [intake.attach(r) for r in receivers] == [True, True, False]
    assert list(intake.tracks) == ["camera", "screen"]


async def test_only_the_first_keyframe_and_wanted_ones_are_decoded(pc: RTCPeerConnection) -> None:
    track = TrackIntake("camera", pc.addTransceiver("video").receiver, max_side=320)
    frames = encoded_frames(VP8, [RED] * 31 + [BLUE] * 31, keyframes={0, 31})
    for frame in frames[:31]:
        track.put((VP8, frame))
    await decoded(track)
    assert (track.frames, track.keyframes, track.decoded) == (31, 1, 1)
    assert track.latest is not None and track.latest.width == 320 and track.live
    first = track.latest
    for frame in frames[31:]:  # a keyframe nobody asked for: left undecoded
        track.put((VP8, frame))
    await decoded(track)
    assert (track.frames, track.keyframes, track.decoded) == (62, 2, 1)
    assert track.latest is first


async def test_a_capture_waits_for_the_keyframe_it_asked_for(pc: RTCPeerConnection) -> None:
    track = TrackIntake("camera", pc.addTransceiver("video").receiver, max_side=512)
    red, blue = encoded_frames(VP8, [RED] * 3, keyframes={0}), encoded_frames(VP8, [BLUE])
    for frame in red:
        track.put((VP8, frame))
    await decoded(track)
    assert await track.capture() is track.latest, "a picture under a second old is reused"
    old = track.latest
    assert old is not None
    object.__setattr__(old, "captured_at", old.captured_at - 5)  # now stale
    looking = asyncio.ensure_future(track.capture(wait=5))
    await asyncio.sleep(0.05)
    assert not looking.done(), "it waits for a fresh keyframe"
    track.put((VP8, red[1]))  # not a keyframe: still waiting
    await asyncio.sleep(0.05)
    assert not looking.done()
    track.put((VP8, blue[0]))
    fresh = await asyncio.wait_for(looking, 5)
    assert fresh is not None and fresh is not old and track.decoded == 2


async def test_a_capture_that_gets_no_keyframe_returns_what_there_is(
    pc: RTCPeerConnection,
) -> None:
    track = TrackIntake("camera", pc.addTransceiver("video").receiver, max_side=512)
    assert await track.capture(wait=0.1) is None  # never sent anything
    assert not track.live
    await track.close()
