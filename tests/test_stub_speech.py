"""testkit.openai_stub.audio: the stub's "speech" voice is a voice the benches can time."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from server.media.libopus import Encoder
from server.media.opus import BITRATE, COMPLEXITY
from testkit.openai_stub.audio import buzz, spoken
from testkit.openai_stub.script import TTS_RATE
from testkit.openai_stub.server import OpenAIStub

FRAME = TTS_RATE // 50  # 20 ms
QUIET = 200.0  # bench/load.py's bar: a received frame at or below it is the bot silent


def _frame_levels(samples: np.ndarray) -> np.ndarray:
    usable = samples[: samples.size - samples.size % FRAME].reshape(-1, FRAME)
    return np.sqrt((usable.astype(np.float64) ** 2).mean(axis=1))


def test_the_voice_starts_loud_and_never_falls_silent_for_the_benches_bar() -> None:
    clip = spoken(TTS_RATE * 30)  # longer than the recording: the loop's seam is in
    levels = _frame_levels(clip)
    assert levels[0] > QUIET  # voice-to-voice is timed to the first loud frame
    quiet_run = longest = 0
    for level in levels:
        quiet_run = quiet_run + 1 if level <= QUIET else 0
        longest = max(longest, quiet_run)
    assert longest < 10  # 10 quiet frames in a row read as the bot stopped (silent_since)
    assert 0 < longest  # but it is speech, with its gaps: not a steady tone


@pytest.mark.parametrize("complexity", [10, COMPLEXITY])
def test_opus_encodes_the_voice_as_speech(complexity: int) -> None:
    """The reason for the voice: at complexity 10 Opus took the buzz for music and coded
    86 % of its frames in CELT alone, at a third of the CPU speech costs (the TOC byte's
    configuration: 0-15 SILK or hybrid, 16-31 CELT). The recorded voice is coded as
    speech, as a real TTS's is."""
    pcm = np.repeat(spoken(TTS_RATE * 3), 2)  # 48 kHz, as the track sends
    encoder = Encoder(48000, BITRATE, complexity)
    configs = np.array(
        [encoder.encode(pcm[i : i + 960].tobytes())[0] >> 3 for i in range(0, pcm.size - 960, 960)]
    )
    assert np.mean(configs < 16) >= 0.95


@pytest.mark.parametrize("voice", ["speech", "buzz"])
def test_the_speech_endpoint_says_the_configured_voice(voice: str) -> None:
    with OpenAIStub() as stub:
        stub.config.tts_voice = voice
        reply = httpx.post(
            f"{stub.base_url}/audio/speech",
            headers={"Authorization": f"Bearer {stub.api_key}"},
            json={"model": "tts-1", "voice": "alloy", "input": "Hello there, how are you?"},
            timeout=10,
        )
    assert reply.status_code == 200
    pcm = np.frombuffer(reply.content, np.int16)
    expected = (spoken if voice == "speech" else buzz)(
        stub.tts_samples("Hello there, how are you?")
    )
    assert np.array_equal(pcm, expected)
