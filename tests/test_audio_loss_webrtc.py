"""A caller on a lossy network, over WebRTC: a real server (its jitter buffer, the Opus
decoder's concealment, the real VAD), an aiortc client whose microphone packets are lost
on the way, the OpenAI-compatible stub hearing the clip being played."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testkit.clip_ear import ClipEar, hearing_stub
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.rtp_loss import PacketLoss, random_loss
from testkit.server_process import ServerProcess, metric
from testkit.turn_clips import complete_clip, write_wav

pytestmark = pytest.mark.e2e

LOST = "parley_audio_packets_lost_total"
QUESTION = "Can you tell me what time the museum opens on Sunday?"


@pytest.fixture(scope="module")
def ear() -> ClipEar:
    return ClipEar()


@pytest.fixture(scope="module")
def models(ear: ClipEar) -> Iterator[OpenAIStub]:
    with hearing_stub(ear, "It opens at ten.", 0.03) as stub:
        yield stub


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], models: OpenAIStub) -> ServerProcess:
    running = start_server(**models.server_settings(preload_models="true"))
    running.wait_models_ready()
    return running


async def test_a_question_through_five_percent_loss_is_answered_and_the_loss_counted(
    server: ServerProcess, ear: ClipEar, tmp_path: Path
) -> None:
    lost_before = metric(server, LOST)
    loss = PacketLoss(random_loss(5.0, seed=7, after=10))
    client = RTCTestClient(server.url, jitter_frames=1, loss=loss)
    clip = complete_clip(QUESTION, "espeak")
    ear.clip = clip
    try:
        await client.connect()
        # The answer asks for in-band FEC, which the concealment uses.
        answer_sdp = client.pc.remoteDescription.sdp
        opus = re.search(r"a=rtpmap:(\d+) opus/48000", answer_sdp, re.I)
        assert opus and re.search(rf"a=fmtp:{opus[1]} .*useinbandfec=1", answer_sdp)
        client.play(str(write_wav(clip, tmp_path / "question.wav", 0.3)))
        answer = await client.wait_for(
            lambda m: m.get("type") == "bot-output" and "ten" in m["data"]["text"], within=20
        )
        assert answer
        heard = [
            m["data"]["text"] for m in client.messages if m.get("type") == "user-transcription"
        ]
        assert any("museum" in words for words in heard)
        sessions = (await client.http.get("/api/sessions")).json()["sessions"]
        mine = next(s for s in sessions if s["pc_id"] == client.pc_id)
    finally:
        ear.clip = None
        await client.close()
    assert len(loss.lost) >= 5
    # Every packet lost on the way was skipped and concealed, none waited for, none late:
    # the server's count can only trail the client's by a loss too recent to be seen.
    assert len(loss.lost) - 2 <= mine["audio_packets_lost"] <= len(loss.lost)
    assert mine["audio_packets_concealed"] == mine["audio_packets_lost"]
    assert mine["audio_packets_late"] == 0
    # And once the call has ended, in the server's metrics.
    for _ in range(50):
        if metric(server, LOST) > lost_before:
            break
        await asyncio.sleep(0.1)
    assert metric(server, LOST) - lost_before >= mine["audio_packets_lost"]
