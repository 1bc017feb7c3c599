"""The plain WebSocket transport (``/ws``): a whole call in PCM and RTVI JSON against a
real server with the real VAD, the models being the OpenAI-compatible stub; and every
kind of bad input refused with a reason while another call goes on untouched."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import httpx
import numpy as np
import pytest
from websockets.exceptions import InvalidStatus

from testkit.openai_stub import OpenAIStub
from testkit.server_process import ServerProcess
from testkit.socket_callers import PcmCaller
from testkit.speech import espeak

pytestmark = pytest.mark.e2e

ANSWER = "The pharmacy opens at nine."


@pytest.fixture(scope="module")
def served(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    stub.config.default_text = ANSWER
    stub.config.transcript = "When does the pharmacy open?"
    stub.config.tts_seconds_per_char = 0.05  # "Hello!": 0.3 s; the answer: 1.4 s
    server = start_server(**stub.server_settings(greeting="Hello!", preload_models="true",
                                                  ws_max_message_bytes="16384"))  # fmt: skip
    server.wait_models_ready()
    return server


def ws_url(server: ServerProcess, path: str = "/ws") -> str:
    return server.url.replace("http://", "ws://") + path


@pytest.mark.timeout(90)
async def test_a_call_over_plain_pcm_is_greeted_hears_a_question_and_answers_it(
    served: ServerProcess,
) -> None:
    async with PcmCaller(ws_url(served)) as caller:
        await caller.ready()
        await caller.wait_for(lambda: "bot-ready" in caller.event_types(), within=10)
        await caller.wait_for(lambda: "bot-stopped-speaking" in caller.event_types(), 10)
        greeted = caller.bot_seconds()
        assert greeted >= 0.28, "the greeting was heard as audio"
        await asyncio.sleep(0.5)
        caller.say(espeak("When does the pharmacy open?"))
        asked = time.monotonic()
        await caller.wait_for(lambda: caller.bot_audio_after(asked + 1.0), within=20)
        types = caller.event_types()
        assert "user-started-speaking" in types and "user-transcription" in types
        await caller.wait_for(lambda: caller.event_types().count("bot-stopped-speaking") == 2, 10)
        assert caller.bot_seconds() > greeted + 1.2, "the answer was heard as audio"
        # 16 kHz PCM, 20 ms a message, paced: no burst of the whole answer at once.
        sizes = [size for _, size in caller.audio_times]
        assert max(sizes) == 640 and np.median(sizes) == 640
        async with httpx.AsyncClient(base_url=served.url) as http:
            listed = (await http.get("/api/sessions")).json()["sessions"]
        mine = [s for s in listed if s["transport"] == "websocket"]
        assert len(mine) == 1 and mine[0]["audio_frames_in"] > 50
        texts = [m.get("content") for m in mine[0]["conversation"]["transcript"]]
        assert ANSWER in texts


@pytest.mark.timeout(60)
async def test_bad_input_is_refused_with_a_reason_and_other_calls_go_on(
    served: ServerProcess,
) -> None:
    async with PcmCaller(ws_url(served)) as bystander:
        await bystander.ready()
        await bystander.wait_for(lambda: "bot-ready" in bystander.event_types(), within=10)
        async with PcmCaller(ws_url(served)) as odd:
            odd.muted = True
            assert odd.ws is not None
            await odd.ws.send(b"\x01\x02\x03")
            await asyncio.wait_for(odd.closed.wait(), 5)
            assert odd.close_code == 1003 and "16-bit" in odd.close_reason
        async with PcmCaller(ws_url(served)) as big:
            big.muted = True
            assert big.ws is not None
            await big.ws.send(bytes(20000))  # over PARLEY_WS_MAX_MESSAGE_BYTES (16384)
            await asyncio.wait_for(big.closed.wait(), 5)
            assert big.close_code == 1009
        async with PcmCaller(ws_url(served)) as garbled:
            assert garbled.ws is not None
            await garbled.ws.send("{not json")
            await garbled.wait_for(lambda: "error" in garbled.event_types(), within=5)
            error = next(m for _, m in garbled.events if m.get("type") == "error")
            assert "malformed JSON" in json.dumps(error)
            assert not garbled.closed.is_set(), "a bad message is reported, not fatal"
        assert not bystander.closed.is_set()
        await bystander.send_json({"label": "rtvi-ai", "type": "client-message", "id": "m1",
                                   "data": {"t": "no-such", "d": {}}})  # fmt: skip
        await bystander.wait_for(lambda: "error-response" in bystander.event_types(), 5)


@pytest.mark.timeout(60)
async def test_a_client_that_floods_messages_has_them_dropped_and_is_told(
    served: ServerProcess,
) -> None:
    async with PcmCaller(ws_url(served)) as flood:
        flood.muted = True
        assert flood.ws is not None
        for _ in range(400):  # over the burst of 200
            await flood.ws.send(np.zeros(160, np.int16).tobytes())
        await flood.wait_for(lambda: "error" in flood.event_types(), within=5)
        error = next(m for _, m in flood.events if m.get("type") == "error")
        assert "too many messages" in json.dumps(error)


@pytest.mark.timeout(60)
async def test_with_api_keys_a_call_needs_one(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub
) -> None:
    server = start_server(**stub.server_settings(api_keys='["k-1"]'))
    # Refused before the upgrade: HTTP 401 with the app's JSON error, no WebSocket at all.
    for url, error in ((ws_url(server), "an API key is required"),
                       (ws_url(server) + "?api_key=k-2", "the API key is not valid")):  # fmt: skip
        with pytest.raises(InvalidStatus) as refused:
            async with PcmCaller(url):
                pass
        assert refused.value.response.status_code == 401
        assert error in json.loads(refused.value.response.body)["error"]
    async with PcmCaller(ws_url(server) + "?api_key=k-1") as keyed:
        await keyed.ready()
        await keyed.wait_for(lambda: "bot-ready" in keyed.event_types(), within=10)
    async with PcmCaller(ws_url(server), headers={"Authorization": "Bearer k-1"}) as bearer:
        await bearer.ready()
        await bearer.wait_for(lambda: "bot-ready" in bearer.event_types(), within=10)
