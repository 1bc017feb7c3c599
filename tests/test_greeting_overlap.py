"""A question asked over the greeting, the moment the call connects (issue 24): a real
server with the real VAD and the real echo canceller, the greeting on, and an aiortc
client that says a short question at once. The LLM and STT are the OpenAI-compatible
stub; its STT hears the words of the clip where the utterance lies in it (ClipEar), so a
question the server heard in pieces reaches the LLM in pieces.

Before the fix the canceller passed the caller's voice through AEC3 while it did not yet
know whether the bot's voice came back, and AEC3 damped it under the greeting: the
question reached the LLM whole in 0 of 20 calls of bench/greeting_overlap.py.

And nothing vanishes silently: speech that makes no turn is counted in /metrics and
stored in the transcript with why (here: muted during the greeting, on purpose).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from testkit.clip_ear import ClipEar, hearing_stub
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess, metric
from testkit.turn_clips import TurnClip, complete_clip, write_wav

# serial: its outcome depends on real-time audio keeping up (see pyproject.toml).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

GREETING = "Hello! How can I help you today?"
ANSWER = "The answer is forty two."
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def ear() -> ClipEar:
    return ClipEar()


@pytest.fixture(scope="module")
def models(ear: ClipEar) -> Iterator[OpenAIStub]:
    with hearing_stub(ear, ANSWER, 0.06) as stub:  # the greeting lasts 1.9 s, as spoken
        yield stub


def settings(stub: OpenAIStub, **more: str) -> dict[str, str]:
    # The stub's voice (a buzz, voice-like and as loud as speech) says the greeting.
    return stub.server_settings(preload_models="true", greeting=GREETING, **more)


def words(text: str) -> list[str]:
    return re.sub(r"[^\w' ]", " ", text.lower()).split()


async def call(url: str, ear: ClipEar, clip: TurnClip, folder: Path,
               after_greeting_starts: bool = False) -> RTCTestClient:  # fmt: skip
    """Connect and say ``clip`` at once (or as the greeting's first audio arrives); the
    connected client, the question said."""
    ear.clip = clip
    wav = write_wav(clip, folder / "question.wav", 0.0)
    client = RTCTestClient(url, jitter_frames=1)
    await client.connect()
    if after_greeting_starts:
        await client.wait_for(lambda m: m.get("type") == "bot-started-speaking", within=10)
    client.play(str(wav))
    return client


@pytest.mark.timeout(240)
async def test_a_question_asked_over_the_greeting_reaches_the_llm_whole(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, ear: ClipEar, tmp_path: Path
) -> None:
    server = start_server(**settings(models))
    server.wait_models_ready()
    clips = [
        complete_clip(text, voice)
        for text in ("Can you tell me what the answer is?", "Is the pharmacy open on Sundays?")
        for voice in ("hibari", "espeak")
    ]
    for clip in clips:
        before = len(models.requests(CHAT))
        client = await call(server.url, ear, clip, tmp_path)
        try:
            said = await client.wait_for(lambda m: m.get("type") == "user-llm-text", within=15)
            await client.wait_for(
                lambda m: m.get("type") == "bot-output" and "forty" in m["data"]["text"],
                within=15,
            )
        finally:
            await client.close()
        asked = [r.body["messages"][-1]["content"] for r in models.requests(CHAT)[before:]]
        assert words(said["data"]["text"]) == words(clip.text), clip.name
        assert [words(a) for a in asked] == [words(clip.text)], clip.name  # one request, whole
        await asyncio.sleep(0.5)


@pytest.mark.timeout(120)
async def test_speech_muted_during_the_greeting_is_counted_and_stored_with_its_reason(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, ear: ClipEar, tmp_path: Path
) -> None:
    server = start_server(**settings(models, user_mute="first_bot_speech"))
    server.wait_models_ready()
    clip = complete_clip("Can you tell me what the answer is?", "espeak")
    before = len(models.requests(CHAT))
    client = await call(server.url, ear, clip, tmp_path, after_greeting_starts=True)
    try:
        await client.wait_for(lambda m: m.get("type") == "user-mute-stopped", within=15)
        deadline = time.monotonic() + 10
        while metric(server, 'parley_user_speech_discarded_total{reason="muted"}') < 1:
            assert time.monotonic() < deadline, "the muted question was not counted"
            await asyncio.sleep(0.2)
        pc_id = client.pc_id
    finally:
        await client.close()
    assert len(models.requests(CHAT)) == before  # muted: no answer, on purpose
    assert "user-llm-text" not in client.types()
    async with httpx.AsyncClient() as http:
        for _ in range(50):  # the record is written a moment after the call ends
            record = (await http.get(f"{server.url}/api/sessions/{pc_id}/transcript")).json()
            if record.get("ended_at"):
                break
            await asyncio.sleep(0.1)
    discards = [e["data"] for e in record["events"] if e["type"] == "discard"]
    assert [d["reason"] for d in discards] == ["muted"]
    assert discards[0]["started_at"]
    assert [t["role"] for t in record["turns"]] == ["assistant"]  # the greeting, no user turn
    assert metric(server, 'parley_user_speech_discarded_total{reason="stt_error"}') == 0
