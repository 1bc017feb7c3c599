"""A call recording's writer: the caller's and the bot's frames placed on the call's clock
in two channels, silence where a side had nothing, the file readable while it is being
written (a crash loses seconds), bounded, and a disk that fails costing the call
nothing. Decoded back with PyAV, as any player would read it."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import av
import numpy as np
import pytest

from server.storage.recording import AHEAD_SECONDS, BOT, USER, CallRecording
from server.storage.recording_file import RATE

FRAME_SECONDS = 0.02


class Clock:
    """The call's clock, moved by the test (the worker reads it from its thread)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def tone(hz: float, rate: int, seconds: float = FRAME_SECONDS) -> bytes:
    t = np.arange(round(rate * seconds)) / rate
    return (np.sin(2 * np.pi * hz * t) * 8000).astype(np.int16).tobytes()


def decode(path: Path) -> tuple[np.ndarray, int]:
    """Both channels as float arrays (2, samples), and the rate."""
    with av.open(str(path)) as container:
        frames = [frame.to_ndarray() for frame in container.decode(audio=0)]
        rate = container.streams.audio[0].rate
    return np.concatenate(frames, axis=1), rate


def level(audio: np.ndarray, rate: int, channel: int, start: float, end: float) -> float:
    """RMS of ``channel`` between ``start`` and ``end`` seconds."""
    part = audio[channel, round(start * rate) : round(end * rate)]
    return float(np.sqrt(np.mean(part**2)))


def play(
    recording: CallRecording,
    clock: Clock,
    user: tuple[float, float] = (0, 0),
    bot: tuple[float, float] = (0, 0),
    bot_silence_until: float = 0,
) -> None:
    """Each side's frames between its ``(start, end)`` seconds on the call's clock, in the
    order they come (the track plays silence until ``bot_silence_until``)."""
    base = recording.started_at
    end = max(user[1], bot[1], bot_silence_until)
    for n in range(round(end / FRAME_SECONDS)):
        at = n * FRAME_SECONDS
        clock.now = base + at  # the track hands a frame over when it is due
        if bot[0] <= at < bot[1]:
            recording.bot(tone(1000, 48000))
        elif at < bot_silence_until:
            recording.bot(bytes(2 * 960))
        clock.now = base + at + FRAME_SECONDS  # a caller's frame, once it has come
        if user[0] <= at < user[1]:
            recording.user(tone(300, RATE))


async def test_both_sides_are_where_they_happened_with_silence_between(tmp_path: Path) -> None:
    clock = Clock()
    recording = CallRecording(tmp_path / "call.ogg", clock=clock)
    play(recording, clock, user=(1.0, 2.0))  # the caller speaks
    # The bot answers, and the caller talks over its end.
    play(recording, clock, user=(3.0, 3.4), bot=(2.5, 3.5))
    clock.now = recording.started_at + 5.0  # the call goes on, silent, then ends
    await recording.close()
    assert not recording.failed and recording.dropped == 0
    audio, rate = decode(tmp_path / "call.ogg")
    assert audio.shape[0] == 2
    assert audio.shape[1] / rate == pytest.approx(5.0, abs=0.05)
    loud, quiet = 0.1, 0.01
    assert level(audio, rate, USER, 1.05, 1.95) > loud
    assert level(audio, rate, USER, 3.05, 3.35) > loud
    assert level(audio, rate, BOT, 2.55, 3.45) > loud
    for start, end in ((0.0, 0.95), (2.1, 2.95), (3.5, 5.0)):
        assert level(audio, rate, USER, start, end) < quiet, (start, end)
    for start, end in ((0.0, 2.45), (3.6, 5.0)):
        assert level(audio, rate, BOT, start, end) < quiet, (start, end)


async def test_a_bot_cut_short_stops_in_the_recording_where_it_stopped(tmp_path: Path) -> None:
    clock = Clock()
    recording = CallRecording(tmp_path / "call.ogg", clock=clock)
    # The bot talks, and the track plays silence from the barge-in on.
    play(recording, clock, bot=(0.0, 1.3), bot_silence_until=3.0)
    await recording.close()
    audio, _ = decode(tmp_path / "call.ogg")
    frames = audio[BOT, : (len(audio[BOT]) // 960) * 960].reshape(-1, 960)
    loud = np.flatnonzero(np.sqrt(np.mean(frames**2, axis=1)) > 0.05)
    assert loud[-1] * 0.02 == pytest.approx(1.3, abs=0.06)


async def test_the_file_is_readable_while_it_is_written(tmp_path: Path) -> None:
    """What a crash would leave: the file as it stands, before the recording ends."""
    clock = Clock()
    recording = CallRecording(tmp_path / "call.ogg", clock=clock)
    play(recording, clock, user=(0.0, 6.0))
    deadline = time.monotonic() + 5
    seconds = 0.0
    while seconds < 4.5 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        shutil.copy(tmp_path / "call.ogg", tmp_path / "crashed.ogg")
        try:
            audio, rate = decode(tmp_path / "crashed.ogg")
        except (av.FFmpegError, ValueError):  # nothing whole yet
            continue
        seconds = audio.shape[1] / rate
    assert seconds >= 4.0, f"{seconds} s of six on disk"
    await recording.close()


async def test_a_side_far_ahead_of_the_clock_is_bounded_and_counted(tmp_path: Path) -> None:
    clock = Clock()
    recording = CallRecording(tmp_path / "call.ogg", clock=clock)
    for _ in range(250):  # 5 s of the caller, all at once (faster than real time)
        recording.user(tone(300, RATE))
    await recording.close()
    assert recording.dropped >= 250 - AHEAD_SECONDS / FRAME_SECONDS - 2
    audio, rate = decode(tmp_path / "call.ogg")
    assert audio.shape[1] / rate <= AHEAD_SECONDS + 0.1


async def test_a_full_queue_drops_frames_instead_of_waiting(tmp_path: Path) -> None:
    clock = Clock()
    recording = CallRecording(tmp_path / "call.ogg", clock=clock, max_queue=4)
    started = time.perf_counter()
    for _ in range(2000):
        recording.bot(tone(1000, 48000))
    assert time.perf_counter() - started < 2.0
    await recording.close()
    assert recording.dropped > 0


async def test_an_unwritable_folder_fails_the_recording_not_the_call(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    recording = CallRecording(tmp_path / "file" / "call.ogg")
    await asyncio.wait_for(recording.close(), 5)
    assert recording.failed
    recording.user(tone(300, RATE))  # still returns at once, takes nothing
    recording.bot(tone(1000, 48000))
