"""Audio levels (cheap, rate-limited, quiet when nothing changes) and the TTS audio tap."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from server.rtvi import server_messages
from server.rtvi.audio import (
    TTS_AUDIO_MAX_BYTES,
    AudioLevelMeter,
    TTSAudioTap,
    audio_level,
)


def tone(amplitude: float, samples: int = 320) -> bytes:
    t = np.arange(samples) / 16000
    return (amplitude * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16).tobytes()


SILENCE = bytes(640)


@pytest.mark.parametrize(
    ("frame", "low", "high"),
    [
        (SILENCE, 0.0, 0.0),
        (b"", 0.0, 0.0),
        (tone(1.0), 0.94, 0.96),  # a full-scale sine is -3 dBFS
        (tone(10 ** (-27 / 20)), 0.49, 0.51),  # -30 dBFS
        (tone(10 ** (-77 / 20)), 0.0, 0.0),  # below the -60 dBFS floor
    ],
)
def test_level_scale(frame: bytes, low: float, high: float) -> None:
    assert low <= audio_level(frame) <= high


def meter() -> tuple[AudioLevelMeter, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []
    return AudioLevelMeter("user-audio-level", sent.append), sent


def feed(m: AudioLevelMeter, frame: bytes, n: int, active: bool) -> None:
    for _ in range(n):
        m.push(frame, active)


def test_active_speech_is_sent_at_10_hz() -> None:
    m, sent = meter()
    feed(m, tone(0.5), 50, active=True)  # one second of 20 ms frames
    assert len(sent) == 10
    for msg in sent:
        server_messages.validate(msg)
    assert sent[0]["type"] == "user-audio-level" and sent[0]["data"]["value"] > 0.8


def test_steady_level_while_inactive_is_not_sent() -> None:
    m, sent = meter()
    feed(m, SILENCE, 500, active=False)
    assert sent == []
    feed(m, tone(0.01), 5, active=False)  # noise appears: a real change, sent once
    feed(m, tone(0.01), 100, active=False)
    assert len(sent) == 1


def test_silence_is_reported_once() -> None:
    m, sent = meter()
    m.silence()
    assert sent == [], "nothing to reset"
    feed(m, tone(0.5), 5, active=True)
    m.silence()
    m.silence()
    assert [msg["data"]["value"] for msg in sent][-1] == 0.0
    assert len(sent) == 2


class FakeOutput:
    def __init__(self) -> None:
        self.playing = False
        self.written: list[tuple[bytes, int, str | None]] = []
        self.flushed = 0
        self.marks: list[Callable[[], None]] = []

    def write(self, pcm: Any, sample_rate: int, text: str | None = None) -> None:
        self.written.append((bytes(pcm), sample_rate, text))

    def mark(self, callback: Callable[[], None]) -> None:
        self.marks.append(callback)

    def flush(self) -> None:
        self.flushed += 1


def test_tts_tap_sends_every_byte_in_bounded_messages_and_passes_through() -> None:
    output, sent = FakeOutput(), []
    tap = TTSAudioTap(output, sent.append)
    pcm = np.arange(20000, dtype=np.int16)  # 40000 bytes: three messages
    tap.write(pcm, 24000, "Hello.")
    tap.write(b"\x01\x00", 24000)
    assert output.written[0] == (pcm.tobytes(), 24000, "Hello.")
    assert len(sent) == 4
    for msg in sent:
        data = server_messages.validate(msg)
        assert data.sample_rate == 24000 and data.num_channels == 1
        assert len(base64.b64decode(data.audio)) <= TTS_AUDIO_MAX_BYTES
    joined = b"".join(base64.b64decode(m["data"]["audio"]) for m in sent)
    assert joined == pcm.tobytes() + b"\x01\x00"
    output.playing = True
    assert tap.playing
    tap.mark(lambda: None)
    tap.flush()
    assert len(output.marks) == 1 and output.flushed == 1
