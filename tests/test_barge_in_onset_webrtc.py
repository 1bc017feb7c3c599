"""Pausing at the VAD's onset over WebRTC: a real server (real VAD, echo canceller and
paced track), an aiortc client talking over the bot's story, the OpenAI-compatible stub
for the LLM, the TTS and the STT (hearing the clip being played)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testkit.clip_ear import ClipEar, hearing_stub
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess, metric
from testkit.turn_clips import TurnClip, complete_clip, write_wav

# serial: its outcome depends on real-time audio keeping up (see pyproject.toml).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

STORY = (
    "Once upon a time there was a small robot who lived in a lighthouse by the sea. "
    "Every night it polished the great lamp until it shone like a star. "
    "Ships passed safely, and the sailors waved at the little robot."
)
PAUSES = "parley_bot_pauses_total"
UNCONFIRMED = f'{PAUSES}{{outcome="unconfirmed"}}'


@pytest.fixture(scope="module")
def ear() -> ClipEar:
    return ClipEar()


@pytest.fixture(scope="module")
def models(ear: ClipEar) -> Iterator[OpenAIStub]:
    with hearing_stub(ear, STORY, 0.03) as stub:  # the stub's voice: ~6 s of buzz
        yield stub


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], models: OpenAIStub) -> ServerProcess:
    running = start_server(**models.server_settings(preload_models="true"))
    running.wait_models_ready()
    return running


async def story_started(client: RTCTestClient) -> None:
    """The bot tells its story; 2 s into it (the echo canceller has ruled out an echo)."""
    client.send_rtvi("send-text", {"content": "Tell me a story.", "options": {}})
    await client.wait_for(lambda m: m.get("type") == "bot-started-speaking", within=20)
    await asyncio.sleep(2.0)


def loud(client: RTCTestClient, start: float) -> int:
    return sum(1 for t, rms in client.audio.frames if t >= start and rms > 200)


async def test_a_short_burst_of_voice_pauses_at_most_and_the_bot_finishes(
    server: ServerProcess, models: OpenAIStub, ear: ClipEar, tmp_path: Path
) -> None:
    hey = complete_clip("Hey.", "espeak")
    burst = TurnClip("burst", "espeak", "burst", "", hey.audio[: round(0.12 * 16000)], [])
    before = metric(server, UNCONFIRMED), metric(server, PAUSES)
    chats = len(models.requests("/v1/chat/completions"))
    client = RTCTestClient(server.url, jitter_frames=1)
    try:
        await client.connect()
        await story_started(client)
        ear.clip = burst
        sent = client.play(str(write_wav(burst, tmp_path / "burst.wav", 0.0)))
        await client.wait_for(lambda m: m.get("type") == "bot-stopped-speaking", within=20)
        assert "bot-interrupted" not in client.types()
        assert "user-started-speaking" not in client.types()  # no turn: never confirmed
        assert loud(client, sent + 1.0) > 30  # the story went on after the burst
        assert len(models.requests("/v1/chat/completions")) == chats + 1
    finally:
        ear.clip = None
        await client.close()
    # The burst paused the bot at its onset, once, and the bot resumed unasked when the
    # VAD dropped it: no pause was judged or interrupted.
    unconfirmed = metric(server, UNCONFIRMED) - before[0]
    assert metric(server, PAUSES) - before[1] == unconfirmed == 1


async def test_a_barge_in_pauses_and_interrupts_the_bot(
    server: ServerProcess, models: OpenAIStub, ear: ClipEar, tmp_path: Path
) -> None:
    before = metric(server, f'{PAUSES}{{outcome="interrupted"}}'), metric(server, PAUSES)
    client = RTCTestClient(server.url, jitter_frames=1)
    try:
        await client.connect()
        await story_started(client)
        models.config.default_text = "The weather is sunny."
        clip = complete_clip("Wait, stop. Tell me about the weather instead.", "espeak")
        ear.clip = clip
        client.play(str(write_wav(clip, tmp_path / "barge.wav", 0.0)))
        await client.wait_for(lambda m: m.get("type") == "bot-interrupted", within=10)
        await client.wait_for(
            lambda m: m.get("type") == "bot-output" and "sunny" in m["data"]["text"], within=15
        )
    finally:
        models.config.default_text = STORY
        ear.clip = None
        await client.close()
    # One pause, held from the onset through the confirmation, ended by the interruption.
    assert metric(server, f'{PAUSES}{{outcome="interrupted"}}') == before[0] + 1
    assert metric(server, PAUSES) == before[1] + 1
