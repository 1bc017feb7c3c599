"""``POST /v1/audio/transcriptions`` and ``POST /v1/audio/speech`` (streamed PCM)."""

from __future__ import annotations

import functools
import io
import math
import wave
from collections.abc import AsyncIterator

import numpy as np
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from testkit.openai_stub.core import StubCore
from testkit.openai_stub.faults import Fault, Truncated, error_response
from testkit.openai_stub.script import TTS_RATE, RecordedRequest


def buzz(n: int) -> np.ndarray:
    """The stub's voice: ``n`` samples (24 kHz int16) of a 140 Hz pulse train rising and
    falling 4 times a second, broadband like a voice."""
    t = np.arange(n) / TTS_RATE
    pitch = 140.0 * (1 + 0.1 * np.sin(2 * math.pi * 0.7 * t))  # a wandering pitch
    phase = np.cumsum(pitch) / TTS_RATE
    saw = 2 * (phase % 1.0) - 1  # a sawtooth: every harmonic up to the Nyquist rate
    syllables = 0.55 + 0.45 * np.sin(2 * math.pi * 4 * t)  # never silent: loud frames
    return (0.3 * 32767 * saw * syllables).astype("<i2")


def tone(n: int) -> np.ndarray:
    """``n`` samples (24 kHz int16) of a steady 220 Hz tone: a voice whose envelope never
    moves (what a hold tone or a flat synthetic voice looks like to the echo path)."""
    t = np.arange(n) / TTS_RATE
    return (0.3 * 32767 * np.sin(2 * math.pi * 220.0 * t)).astype("<i2")


# What the "speech" voice reads, looped: sentences of an answer's kind, with their pauses.
PARAGRAPH = (
    "Sure, I can help with that. The museum opens at nine in the morning and closes at "
    "six. On Sundays it opens an hour later. Tickets cost twelve euros, and children "
    "under ten go in free. Is there anything else you would like to know?"
)


@functools.cache
def _paragraph() -> np.ndarray:
    # Imported here: testkit.speech loads pytest and onnxruntime, which a stub that
    # buzzes (every test's) has no use for.
    from testkit.speech import espeak

    return _short_pauses(espeak(PARAGRAPH, TTS_RATE))


_QUIET_RMS = 300.0  # a 10 ms block at or below this counts as a pause


def _short_pauses(samples: np.ndarray, block: int = TTS_RATE // 100, keep: int = 8) -> np.ndarray:
    """``samples`` with every quiet stretch cut to ``keep`` 10 ms blocks, and none at either
    end: the voice is never quiet for the 200 ms that the benches read as the bot stopped,
    and its first frame is loud (voice-to-voice is timed to it)."""
    blocks = samples[: samples.size - samples.size % block].reshape(-1, block)
    loud = np.sqrt((blocks.astype(np.float64) ** 2).mean(axis=1)) > _QUIET_RMS
    kept: list[int] = []
    quiet = 0
    for index, is_loud in enumerate(loud):
        quiet = 0 if is_loud else quiet + 1
        if quiet <= keep:
            kept.append(index)
    voiced = [index for index in kept if loud[index]]
    first, last = kept.index(voiced[0]), kept.index(voiced[-1])
    return blocks[kept[first : last + 1]].reshape(-1)


def spoken(n: int) -> np.ndarray:
    """``n`` samples (24 kHz int16) of a recorded voice: espeak-ng reading a paragraph,
    looped. Opus's VOIP encoder, which coded the bot's voice until 2026-11-27, spent about
    twice the CPU on it as on :func:`buzz` (at complexity 10: 255 against 87 µs a 20 ms
    frame), so a bench of the server's CPU uses this; CELT, which codes it now, costs
    the same on both (73 and 70 µs)."""
    clip = _paragraph()
    return np.resize(clip, n)


def wav_info(data: bytes) -> tuple[int, int, int, int]:
    """``(channels, sample width, rate, frames)`` of a WAV file's bytes."""
    with wave.open(io.BytesIO(data), "rb") as wav:
        return wav.getnchannels(), wav.getsampwidth(), wav.getframerate(), wav.getnframes()


class AudioEndpoints(StubCore):
    """Transcriptions (a scripted or default text) and speech (a buzz: a 140 Hz pulse
    train rising and falling 4 times a second, broadband like a voice, so what depends on
    the bot's voice in a microphone, such as echo detection, sees something voice-like)."""

    def tts_samples(self, text: str) -> int:
        """How many samples the speech endpoint returns for ``text``."""
        seconds = max(self.config.tts_min_seconds, len(text) * self.config.tts_seconds_per_char)
        return round(seconds * TTS_RATE)

    async def _transcriptions(self, request: Request) -> Response:
        record, item, early = await self._begin(request, "stt")
        if early is not None:
            return early
        if self.config.stt_delay and not await self._sleep(self.config.stt_delay, request, record):
            return error_response(504)
        record.completed = True
        if isinstance(item, Fault) and item.kind == "malformed":
            return Response(b'{"text": not json', media_type="application/json")
        text = item if isinstance(item, str) else self.config.transcript
        if not isinstance(item, str) and self.config.transcriber is not None:
            text = self.config.transcriber(record.body["file"])
        return JSONResponse({"text": text})

    async def _speech(self, request: Request) -> Response:
        record, item, early = await self._begin(request, "tts")
        if early is not None:
            return early
        delay = self.config.tts_first_audio_delay
        if delay and not await self._sleep(delay, request, record):
            return error_response(504)
        fault = item if isinstance(item, Fault) else None
        if fault is not None and fault.kind == "malformed" and fault.after == 0:
            record.completed = True  # a 200 that is not audio at all
            return JSONResponse({"object": "error", "message": "not audio"})
        pcm = self.tts_audio(record.body.get("input", "")).tobytes()
        return StreamingResponse(
            self._audio(pcm, fault, record), media_type="application/octet-stream"
        )

    def tts_audio(self, text: str) -> np.ndarray:
        """The speech endpoint's samples for ``text`` (24 kHz int16)."""
        n = self.tts_samples(text)
        voices = {"speech": spoken, "tone": tone}
        return voices.get(self.config.tts_voice, buzz)(n)

    async def _audio(
        self, pcm: bytes, fault: Fault | None, record: RecordedRequest
    ) -> AsyncIterator[bytes]:
        size = self.config.tts_chunk_bytes
        on_purpose = False
        try:
            for n, start in enumerate(range(0, len(pcm), size)):
                if fault is not None and n >= fault.after:
                    on_purpose = fault.kind in ("cut", "truncate")
                    async for data in self._strike(fault):
                        yield data
                    fault = None
                await self._pause(self.config.tts_chunk_delay if n else 0.0)
                yield pcm[start : start + size]
            record.completed = True
        except Truncated:
            return
        finally:
            record.disconnected = not record.completed and not on_purpose
