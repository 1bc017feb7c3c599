"""A recorded call end to end: a real server (``PARLEY_RECORDING``) with the real VAD, the
models being the OpenAI-compatible stub, and a caller over the plain WebSocket who is
told the call is recorded, asks, and talks over the answer. The recording is fetched
over HTTP under the call's key and decoded: its length is the call's, the caller is in
the left channel where they spoke, the bot in the right, and the bot stops where the
caller barged in. A WebRTC call (Opus both ways) is recorded the same way."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Callable
from typing import Any

import av
import httpx
import numpy as np
import pytest

from server.storage.recording import BOT, USER
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess
from testkit.socket_callers import PcmCaller
from testkit.speech import espeak

pytestmark = pytest.mark.e2e

NOTICE = "This call is recorded."
QUESTION = "When does the pharmacy open?"
BARGE = "Sorry, what about Saturdays and Sundays?"
ANSWER = "The pharmacy opens at nine in the morning and closes at six in the evening, every day."
KEY, OTHER_KEY = "k-1", "k-2"
FRAME = 0.02
LOUD = 0.02  # RMS of a frame (full scale 1) that someone is saying something in


@pytest.fixture(scope="module")
def served(
    start_server: Callable[..., ServerProcess],
    stub: OpenAIStub,
    tmp_path_factory: pytest.TempPathFactory,
) -> ServerProcess:
    stub.config.default_text = ANSWER
    stub.config.transcript = QUESTION
    stub.config.tts_seconds_per_char = 0.05  # the answer: 4.3 s, time to talk over it
    folder = tmp_path_factory.mktemp("recordings")
    settings = stub.server_settings(
        greeting="Hello!", recording="true",
        recording_notice=NOTICE, recording_dir=str(folder), api_keys=f'["{KEY}","{OTHER_KEY}"]',
    )  # fmt: skip
    return start_server(**settings)


def frame_levels(channel: np.ndarray, rate: int) -> np.ndarray:
    """RMS per 20 ms frame."""
    size = round(rate * FRAME)
    frames = channel[: len(channel) // size * size].reshape(-1, size)
    return np.sqrt(np.mean(frames**2, axis=1))


def share_loud(levels: np.ndarray, start: float, end: float) -> float:
    """The share of frames between ``start`` and ``end`` seconds with someone speaking."""
    part = levels[max(0, round(start / FRAME)) : round(end / FRAME)]
    return float(np.mean(part > LOUD)) if len(part) else 0.0


async def a_recorded_call(server: ServerProcess) -> dict[str, float]:
    """The call; when things happened, in seconds from its start (the caller's clock)."""
    url = server.url.replace("http://", "ws://") + f"/ws?api_key={KEY}"
    question, barge = espeak(QUESTION), espeak(BARGE)
    start = time.monotonic()
    async with PcmCaller(url) as caller:
        await caller.ready()
        stops = caller.event_types
        await caller.wait_for(lambda: stops().count("bot-stopped-speaking") >= 2, 20)  # notice, hi
        await asyncio.sleep(0.5)
        asked = caller.say(question)
        question_end = asked + len(question) / 16000
        starts = caller.event_types
        await caller.wait_for(lambda: starts().count("bot-started-speaking") >= 3, within=20)
        live = await live_recording_seconds(server)
        live_at = time.monotonic() - start
        await asyncio.sleep(1.5)
        barged = caller.say(barge)
        await caller.wait_for(lambda: stops().count("bot-stopped-speaking") >= 3, within=5)
        await asyncio.sleep(len(barge) / 16000 + 2.0)
        ended = time.monotonic()
    return {
        "asked": asked - start,
        "question_end": question_end - start,
        "barged": barged - start,
        "barge_end": barged + len(barge) / 16000 - start,
        "ended": ended - start,
        "live": live,
        "live_at": live_at,
    }


async def live_recording_seconds(server: ServerProcess) -> float:
    """How much of the call in progress its recording holds already."""
    auth = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=server.url, headers=auth) as http:
        session = (await http.get("/api/history")).json()["sessions"][0]
        assert session["live"] and session["recording"]
        answer = await http.get(f"/api/sessions/{session['id']}/recording")
    assert answer.status_code == 200
    with av.open(io.BytesIO(answer.content)) as container:
        return sum(f.samples for f in container.decode(audio=0)) / 48000


async def ended_session(http: httpx.AsyncClient, auth: dict[str, str]) -> dict[str, Any]:
    """The last call as history lists it, once it has ended."""
    deadline = time.monotonic() + 10
    while True:
        sessions = (await http.get("/api/history", headers=auth)).json()["sessions"]
        if sessions and not sessions[0]["live"]:
            return sessions[0]
        assert time.monotonic() < deadline, sessions
        await asyncio.sleep(0.2)


@pytest.mark.timeout(120)
async def test_a_recorded_call_has_both_sides_where_they_happened(served: ServerProcess) -> None:
    at = await a_recorded_call(served)
    # Written as the call goes: mid-call, all but the last seconds are in the file.
    assert at["live_at"] - 2.5 < at["live"] <= at["live_at"]
    auth = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth) as http:
        session = await ended_session(http, auth)
        assert session["recording"] is True
        answer = await http.get(f"/api/sessions/{session['id']}/recording")
        assert answer.status_code == 200 and answer.headers["content-type"] == "audio/ogg"
        transcript = (await http.get(f"/api/sessions/{session['id']}/transcript")).json()
    said = [t["text"] for t in transcript["turns"] if t["role"] == "assistant"]
    assert said[:2] == [NOTICE, "Hello!"], "the notice, then the greeting"

    with av.open(io.BytesIO(answer.content)) as container:
        audio = np.concatenate([f.to_ndarray() for f in container.decode(audio=0)], axis=1)
        rate = container.streams.audio[0].rate
    assert audio.shape[0] == 2
    # From the call's first audio (the caller's microphone, as soon as it connected: just
    # after the first) to its end (the caller hung up just before the second).
    assert audio.shape[1] / rate == pytest.approx(at["ended"], abs=1.0)
    user, bot = frame_levels(audio[USER], rate), frame_levels(audio[BOT], rate)

    # The caller: silent until the question, speaking through it (espeak pauses between
    # words), nothing of the bot in their channel.
    assert share_loud(user, 0, at["asked"] - 0.3) < 0.02
    assert share_loud(user, at["asked"] + 0.3, at["question_end"] - 0.3) > 0.5
    assert share_loud(user, at["question_end"] + 0.3, at["barged"] - 0.3) < 0.02
    # The bot: the notice and the greeting before the question, the answer after it,
    # nothing of the caller in its channel.
    assert share_loud(bot, 0, at["asked"] - 0.3) > 0.2
    assert share_loud(bot, at["asked"] + 0.3, at["question_end"] - 0.3) < 0.02
    after = round(at["question_end"] / FRAME)
    answered = (after + int(np.argmax(bot[after:] > LOUD))) * FRAME
    assert at["question_end"] - 0.5 < answered < at["barged"] - 1.0
    assert share_loud(bot, answered, at["barged"] - 0.3) > 0.7

    # The barge-in, as the recording has it: where the caller starts talking over the
    # bot, the bot is still speaking; within a second it stops and stays quiet while the
    # caller goes on.
    start = round((at["barged"] - 0.5) / FRAME)
    onset = (start + int(np.argmax(user[start:] > LOUD))) * FRAME
    assert onset == pytest.approx(at["barged"], abs=0.5)
    assert share_loud(bot, onset - 0.7, onset - 0.2) > 0.7, "the bot was talking"
    # Where it stops: the first frame of 0.4 s without a loud one (its voice dips between
    # syllables). The VAD hears the onset of speech below the level counted as speech
    # here: the pause at the onset may come a few frames before it.
    first = round((onset - 0.2) / FRAME)
    cut = next(
        n * FRAME
        for n in range(first, len(bot))
        if share_loud(bot, n * FRAME, n * FRAME + 0.4) == 0
    )
    assert onset - 0.2 < cut < onset + 1.0, (onset, cut)
    assert share_loud(bot, cut + 0.1, at["barge_end"] - 0.2) < 0.02, "and it stopped"


@pytest.mark.timeout(30)
async def test_a_recording_is_served_under_its_transcripts_keys(served: ServerProcess) -> None:
    url = served.url.replace("http://", "ws://") + f"/ws?api_key={KEY}"
    async with PcmCaller(url) as caller:  # a short call: greeted, then gone
        await caller.ready()
        await caller.wait_for(lambda: "bot-stopped-speaking" in caller.event_types(), 20)
    own = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=served.url) as http:
        session = await ended_session(http, own)
        assert session["recording"] is True
        path = f"/api/sessions/{session['id']}/recording"
        assert (await http.get(path)).status_code == 401
        other = await http.get(path, headers={"Authorization": f"Bearer {OTHER_KEY}"})
        assert other.status_code == 404 and "error" in other.json()
        missing = await http.get("/api/sessions/no-such-call/recording", headers=own)
        assert missing.status_code == 404
        assert (await http.get(path, headers=own)).status_code == 200


@pytest.mark.timeout(60)
async def test_a_webrtc_call_is_recorded_too(served: ServerProcess) -> None:
    own = {"Authorization": f"Bearer {KEY}"}
    client = RTCTestClient(served.url)  # its microphone sends silence
    client.http.headers.update(own)
    start = time.monotonic()
    try:
        await client.connect()
        stops = client.types
        await asyncio.wait_for(_until(lambda: stops().count("bot-stopped-speaking") >= 2), 20)
        await asyncio.sleep(0.5)
    finally:
        await client.close()
    length = time.monotonic() - start
    async with httpx.AsyncClient(base_url=served.url, headers=own) as http:
        session = await ended_session(http, own)
        assert session["id"] == client.pc_id and session["recording"] is True
        answer = await http.get(f"/api/sessions/{client.pc_id}/recording")
    with av.open(io.BytesIO(answer.content)) as container:
        audio = np.concatenate([f.to_ndarray() for f in container.decode(audio=0)], axis=1)
        rate = container.streams.audio[0].rate
    assert audio.shape[0] == 2
    assert audio.shape[1] / rate == pytest.approx(length, abs=1.0)
    user, bot = frame_levels(audio[USER], rate), frame_levels(audio[BOT], rate)
    seconds = audio.shape[1] / rate
    assert share_loud(bot, 0, seconds) > 0.2, "the notice and the greeting, as played"
    assert share_loud(user, 0, seconds) < 0.02, "a silent microphone"


async def _until(check: Callable[[], bool]) -> None:
    while not check():
        await asyncio.sleep(0.05)


@pytest.mark.timeout(60)
async def test_a_caller_who_sends_nothing_is_recorded_from_the_bots_first_words(
    served: ServerProcess,
) -> None:
    """No audio from the caller at all: the bot's first frame that is not silence (the
    notice) starts the recording."""
    url = served.url.replace("http://", "ws://") + f"/ws?api_key={KEY}"
    async with PcmCaller(url) as caller:
        caller.muted = True  # not even a silent frame
        await caller.ready()
        await caller.wait_for(lambda: caller.event_types().count("bot-stopped-speaking") >= 2, 20)
    own = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=served.url, headers=own) as http:
        session = await ended_session(http, own)
        assert session["recording"] is True
        answer = await http.get(f"/api/sessions/{session['id']}/recording")
    with av.open(io.BytesIO(answer.content)) as container:
        audio = np.concatenate([f.to_ndarray() for f in container.decode(audio=0)], axis=1)
        rate = container.streams.audio[0].rate
    user, bot = frame_levels(audio[USER], rate), frame_levels(audio[BOT], rate)
    assert int(np.argmax(bot > LOUD)) * FRAME < 0.5, "it starts with the notice"
    assert share_loud(user, 0, audio.shape[1] / rate) == 0
