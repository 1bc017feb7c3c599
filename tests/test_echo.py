"""The stand-in audio path: an utterance is played back once the speaker stops."""

from __future__ import annotations

import numpy as np

from pipeline.echo import EchoPipeline


class Recorder:
    def __init__(self) -> None:
        self.writes: list[tuple[bytes, int]] = []
        self.flushes = 0

    def write(self, pcm: bytes | np.ndarray, sample_rate: int) -> None:
        self.writes.append((bytes(pcm), sample_rate))

    def flush(self) -> None:
        self.flushes += 1


def frames(seconds: float, amp: int) -> list[bytes]:
    n = round(seconds / 0.02)
    t = np.arange(320) / 16000
    loud = (amp * np.sin(2 * np.pi * 200 * t)).astype(np.int16).tobytes()
    return [loud] * n


def test_utterance_is_played_after_trailing_silence() -> None:
    out = Recorder()
    echo = EchoPipeline(out, silence_secs=0.6)
    for frame in frames(0.5, 0) + frames(1.0, 5000) + frames(0.4, 0):
        echo.push_audio(frame)
    assert out.writes == [], "still inside the silence window"
    for frame in frames(0.3, 0):
        echo.push_audio(frame)
    assert len(out.writes) == 1
    pcm, rate = out.writes[0]
    assert rate == 16000
    assert len(pcm) == round(1.6 / 0.02) * 640  # 1 s of speech + 0.6 s of trailing silence
    assert echo.utterances == 1


def test_silence_alone_plays_nothing() -> None:
    out = Recorder()
    echo = EchoPipeline(out)
    for frame in frames(3.0, 50):
        echo.push_audio(frame)
    assert out.writes == []


def test_long_speech_is_cut_at_the_limit_and_interrupt_flushes() -> None:
    out = Recorder()
    echo = EchoPipeline(out, max_utterance_secs=1.0)
    for frame in frames(2.5, 5000):
        echo.push_audio(frame)
    assert len(out.writes) == 2
    echo.interrupt()
    assert out.flushes == 1
