"""Audio-derived RTVI messages: user and bot audio levels, and the bot's TTS audio (opt-in).

Levels are cheap on purpose (they sit on the 20 ms audio path): one RMS over every
fifth frame (10 Hz), sent only while the speaker is active or when the level moved
noticeably, so a quiet session sends nothing.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import numpy as np

from pipeline.audio.levels import INT16_FULL_SCALE, dbfs, level, mean_square
from pipeline.interruptions.barge_in import PausableOutput
from server.rtvi.server_messages import AudioData, AudioLevelData, build

LEVEL_EVERY_FRAMES = 5  # of 20 ms: 10 Hz
LEVEL_MIN_CHANGE = 0.05  # what counts as a change worth sending while inactive
LEVEL_FLOOR_DB = -60.0  # dBFS that maps to 0 (full scale maps to 1)
SILENCE_DB = -120.0  # what digital silence reads: below the scale, so it maps to 0
# Largest PCM chunk per bot-tts-audio message (base64 makes it a third larger), well
# under what any data channel carries in one message.
TTS_AUDIO_MAX_BYTES = 16000

Send = Callable[[dict[str, Any]], None]


def audio_level(frame: bytes) -> float:
    """Loudness 0..1 of s16 PCM: dBFS mapped linearly from ``LEVEL_FLOOR_DB`` to 0."""
    samples = np.frombuffer(frame, dtype=np.int16)
    db = dbfs(mean_square(samples, INT16_FULL_SCALE), floor_db=SILENCE_DB)
    return level(db, LEVEL_FLOOR_DB)


class AudioLevelMeter:
    """Sends ``user-audio-level`` or ``bot-audio-level`` for one audio stream."""

    def __init__(
        self,
        type_: str,
        send: Send,
        every: int = LEVEL_EVERY_FRAMES,
        min_change: float = LEVEL_MIN_CHANGE,
    ) -> None:
        self.type = type_
        self._send = send
        self._every = every
        self._min_change = min_change
        self._count = 0
        self._last = 0.0

    def push(self, frame: bytes, active: bool) -> None:
        """One audio frame; ``active``: the speaker is speaking (send even if unchanged)."""
        self._count += 1
        if self._count < self._every:
            return
        self._count = 0
        level = audio_level(frame)
        if active or abs(level - self._last) >= self._min_change:
            self._emit(level)

    def silence(self) -> None:
        """The stream went quiet: say so once."""
        self._count = 0
        if self._last > 0.0:
            self._emit(0.0)

    def _emit(self, level: float) -> None:
        self._last = level
        self._send(build(self.type, AudioLevelData(value=round(level, 3))))


class TTSAudioTap:
    """The outbound audio as the pipeline sees it, sending each TTS chunk to the client
    as ``bot-tts-audio`` (base64 s16le mono at the TTS's rate) as it is generated."""

    def __init__(self, output: PausableOutput, send: Send) -> None:
        self._output = output
        self._send = send

    @property
    def playing(self) -> bool:
        return self._output.playing

    @property
    def paused(self) -> bool:
        return bool(getattr(self._output, "paused", False))

    def pause(self) -> None:
        self._output.pause()

    def resume(self) -> None:
        self._output.resume()

    def write(self, pcm: bytes | np.ndarray, sample_rate: int, text: str | None = None) -> None:
        self._output.write(pcm, sample_rate, text)
        data = pcm.tobytes() if isinstance(pcm, np.ndarray) else bytes(pcm)
        for start in range(0, len(data), TTS_AUDIO_MAX_BYTES):
            chunk = base64.b64encode(data[start : start + TTS_AUDIO_MAX_BYTES]).decode()
            audio = AudioData(audio=chunk, sample_rate=sample_rate, num_channels=1)
            self._send(build("bot-tts-audio", audio))

    def mark(self, callback: Callable[[], None]) -> None:
        self._output.mark(callback)

    def flush(self) -> None:
        self._output.flush()
