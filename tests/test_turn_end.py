"""The end of the user's turn over WebRTC: a real server with the real VAD and end-of-turn
model, the OpenAI-compatible stub for STT, LLM and TTS (its STT hears the words of the
clip being played, see :class:`testkit.turn_clips.ClipEar`), and an aiortc client playing
generated speech."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from testkit.clip_ear import ClipEar
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ROOT, ServerProcess, metric
from testkit.turn_clips import TurnClip, complete_clip, paused_clip, write_wav

pytestmark = pytest.mark.e2e

LEAD = 0.5


@pytest.fixture(scope="module")
def ear() -> ClipEar:
    return ClipEar()


@pytest.fixture(scope="module")
def models(ear: ClipEar) -> Iterator[OpenAIStub]:
    with OpenAIStub() as stub:
        stub.config.transcriber = ear
        stub.config.stt_delay = 0.05
        stub.config.first_token_delay = 0.2
        stub.config.default_text = "Sure, I can help with that."
        yield stub


def settings(stub: OpenAIStub, **more: str) -> dict[str, str]:
    return stub.server_settings(preload_models="true", **more)


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], models: OpenAIStub) -> ServerProcess:
    running = start_server(**settings(models))
    running.wait_models_ready()
    return running


async def play(
    server: ServerProcess, ear: ClipEar, clip: TurnClip, folder: Path
) -> tuple[RTCTestClient, float]:
    """Connect, play ``clip``, wait for the answer to play out; returns the client (closed)
    and the time the clip's speech ended."""
    ear.clip = clip
    async with RTCTestClient(server.url, jitter_frames=1) as client:
        started = client.play(str(write_wav(clip, folder / "clip.wav", LEAD)))
        end = started + LEAD + clip.speech_end
        await client.wait_for(lambda m: m.get("type") == "bot-stopped-speaking", within=20)
        await asyncio.sleep(0.3)
    return client, end


async def test_a_turn_with_a_pause_inside_is_one_turn_with_one_answer(
    server: ServerProcess, models: OpenAIStub, ear: ClipEar, tmp_path: Path
) -> None:
    text = "Could you book a table for two people on Friday?"
    clip = paused_clip("unfinished", text, "for", 0.6, "hibari")
    before = len(models.requests("/v1/chat/completions"))
    client, speech_end = await play(server, ear, clip, tmp_path)
    # The bot said nothing before the user's last word.
    assert not [t for t, rms in client.audio.frames if t < speech_end and rms > 200]
    types = client.types()
    assert types.count("user-stopped-speaking") == 1
    assert [m["data"]["text"] for m in client.messages if m["type"] == "user-llm-text"] == [text]
    chats = models.requests("/v1/chat/completions")[before:]
    assert chats[-1].body["messages"][-1] == {"role": "user", "content": text}
    async with httpx.AsyncClient() as http:
        record = (await http.get(f"{server.url}/api/sessions/{client.pc_id}/transcript")).json()
    assert [t["text"] for t in record["turns"] if t["role"] == "user"] == [text]
    assert metric(server, "parley_turn_model_seconds_count") >= 2  # both pauses scored


async def test_a_statement_is_answered_by_a_reply_prepared_before_the_turn_ended(
    server: ServerProcess, models: OpenAIStub, ear: ClipEar, tmp_path: Path
) -> None:
    used = metric(server, 'parley_preemptive_replies_total{outcome="used"}')
    clip = complete_clip("Please turn off the lights in the kitchen.", "hibari")
    client, _ = await play(server, ear, clip, tmp_path)
    types = client.types()
    # The client sees the answer start only once the user's turn has ended.
    assert types.count("bot-llm-started") == 1
    assert types.index("user-stopped-speaking") < types.index("bot-llm-started")
    assert metric(server, 'parley_preemptive_replies_total{outcome="used"}') == used + 1
    assert metric(server, "parley_user_turn_end_wait_seconds_count") >= 1


async def test_the_fixed_window_uses_no_model(
    start_server: Callable[..., ServerProcess], models: OpenAIStub, ear: ClipEar, tmp_path: Path
) -> None:
    server = start_server(**settings(models, turn_end="fixed"))
    server.wait_models_ready()
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{server.url}/health")).json()["models"]["turn_end"] is None
    client, speech_end = await play(
        server, ear, complete_clip("What time is it?", "espeak"), tmp_path
    )
    stopped = client.arrivals[client.types().index("user-stopped-speaking")]
    assert stopped - speech_end > 0.7  # 0.2 s VAD stop + 0.6 s, whatever the words
    assert metric(server, "parley_turn_model_seconds_count") == 0


def test_a_missing_end_of_turn_model_stops_the_start(tmp_path: Path) -> None:
    # A pipecat package without the model file, found first on the path.
    (tmp_path / "shadow" / "pipecat").mkdir(parents=True)
    (tmp_path / "shadow" / "pipecat" / "__init__.py").write_text("")
    with pytest.raises(
        RuntimeError, match=r"smart-turn-v3\.2-cpu\.onnx is missing.*pipecat-ai==1\.14\.0"
    ):
        ServerProcess(
            {"PYTHONPATH": f"{tmp_path / 'shadow'}:{ROOT}", "PARLEY_STORAGE": "none"},
            tmp_path / "server.log",
        )
    # The fixed window needs no model: the same server starts and answers.
    ok = ServerProcess(
        {"PYTHONPATH": f"{tmp_path / 'shadow'}:{ROOT}", "PARLEY_STORAGE": "none",
         "PARLEY_TURN_END": "fixed"},
        tmp_path / "server2.log",
    )  # fmt: skip
    try:
        assert httpx.get(f"{ok.url}/health").json()["models"]["turn_end"] is None
    finally:
        ok.stop()
