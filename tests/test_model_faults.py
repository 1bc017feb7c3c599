"""Model endpoints that fail, through a real server and an aiortc client.

Every model is the OpenAI-compatible stub, scripted to fail: down (connection refused),
slow (no first token in time), hanging mid-stream, cut, garbage, HTTP 500 and 429. Each
failure must end the turn with a non-fatal RTVI ``error``, keep the context consistent
(the user's words kept, the assistant message holding what was actually said) and leave
the session able to answer the next turn once the endpoint recovers. The circuit
breaker is checked end to end on a server of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.openai_stub import Fault, OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess
from testkit.speech import make_speech

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
STT = "/v1/audio/transcriptions"


def all_stub_settings(stub: OpenAIStub, **extra: str) -> dict[str, str]:
    return stub.server_settings(
        llm_timeout="1", stt_timeout="1.5", tts_timeout="1", tools_enabled="false", **extra
    )


@pytest.fixture(scope="module")
def faulty(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    """A server whose breakers never open: each fault is seen on its own."""
    return start_server(**all_stub_settings(stub, circuit_failure_threshold="0"))


@pytest.fixture
def fresh(stub: OpenAIStub) -> Iterator[OpenAIStub]:
    stub.reset()
    yield stub
    if not stub.running:
        stub.start()  # a test that stopped it failed before bringing it back
    stub.reset()


async def connected(server: ServerProcess) -> RTCTestClient:
    client = RTCTestClient(server.url)
    await client.connect()
    return client


def is_type(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("type") == name


async def typed_turn(client: RTCTestClient, text: str) -> int:
    """Send a typed user turn; returns the index of the first message it caused."""
    mark = len(client.messages)
    client.send_rtvi("send-text", {"content": text})
    return mark


async def next_of(
    client: RTCTestClient, mark: int, name: str, within: float = 10.0
) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        for msg in client.messages[mark:]:
            if msg.get("type") == name:
                return msg
        assert time.monotonic() < deadline, f"no {name}; got {client.types()[mark:]}"
        await asyncio.sleep(0.02)


async def turn_fails(client: RTCTestClient, text: str, service: str, match: str) -> list[str]:
    """A typed turn that must end in a non-fatal error from ``service``; the messages
    it caused, once the turn is over."""
    mark = await typed_turn(client, text)
    error = await next_of(client, mark, "error")
    assert error["data"]["fatal"] is False
    assert error["data"]["error"].startswith(f"{service}: "), error
    assert match in error["data"]["error"], error
    await asyncio.sleep(0.3)  # what was already said plays out
    return client.types()[mark:]


async def turn_works(client: RTCTestClient, text: str) -> str:
    mark = await typed_turn(client, text)
    await next_of(client, mark, "bot-stopped-speaking")
    outputs = [m["data"]["text"] for m in client.messages[mark:] if m["type"] == "bot-output"]
    assert "error" not in client.types()[mark:]
    return " ".join(outputs)


async def transcript(server: ServerProcess, pc_id: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient() as http:
        answer = await http.get(f"{server.url}/api/sessions/{pc_id}")
    assert answer.status_code == 200, "the session is still up"
    return answer.json()["conversation"]["transcript"]


async def health(server: ServerProcess) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{server.url}/health")).json()


# -- the LLM ---------------------------------------------------------------------------------

LLM_FAULTS = {
    "http-500": (lambda s: s.script_chat(Fault.http(500)), "HTTP 500"),
    "http-429": (lambda s: s.script_chat(Fault.http(429)), "rate limiting"),
    "garbage": (lambda s: s.script_chat(Fault.malformed(after=0)), "not valid JSON"),
    "cut": (lambda s: s.script_chat(Fault.cut(after=0)), "ended mid-way"),
    "hang": (lambda s: s.script_chat(Fault.hang()), "no answer within 1 s"),
    "slow-first-token": (
        lambda s: setattr(s.config, "first_token_delay", 3.0),
        "no first token within 1 s",
    ),
}


@pytest.mark.parametrize("fault", LLM_FAULTS)
async def test_an_llm_fault_ends_the_turn_and_the_next_one_works(
    faulty: ServerProcess, fresh: OpenAIStub, fault: str
) -> None:
    inject, match = LLM_FAULTS[fault]
    client = await connected(faulty)
    try:
        inject(fresh)
        seen = await turn_fails(client, "First question?", "llm", match)
        assert "bot-llm-stopped" in seen, "the client's LLM indicator is closed"
        assert "bot-started-speaking" not in seen
        fresh.config.first_token_delay = 0.0
        assert await turn_works(client, "Second question?") == fresh.config.default_text
        said = await transcript(faulty, client.pc_id)
        assert [m["role"] for m in said] == ["user", "user", "assistant"], said
        assert said[0]["content"] == "First question?"
        # The recovered turn's request carries the user's first words too.
        sent = fresh.requests(CHAT)[-1].body["messages"]
        assert [m["content"] for m in sent if m["role"] == "user"] == [
            "First question?",
            "Second question?",
        ]
    finally:
        await client.close()


async def test_an_llm_hanging_mid_answer_keeps_what_was_said(
    faulty: ServerProcess, fresh: OpenAIStub
) -> None:
    client = await connected(faulty)
    try:
        # "Hello there! How" then silence: the first sentence is complete and spoken, and
        # still playing (1.8 s of audio) when the LLM times out.
        fresh.config.tts_seconds_per_char = 0.15
        fresh.script_chat(Fault.stall(5, after=3))
        seen = await turn_fails(client, "Tell me something.", "llm", "stalled for more than 1 s")
        if "bot-stopped-speaking" not in seen:
            await client.wait_for(is_type("bot-stopped-speaking"), within=5)
        said = await transcript(faulty, client.pc_id)
        assert said[-1] == {"role": "assistant", "content": "Hello there!", "interrupted": False}
        fresh.config.tts_seconds_per_char = 0.01
        assert await turn_works(client, "Go on?") == fresh.config.default_text
        sent = fresh.requests(CHAT)[-1].body["messages"]
        assert {"role": "assistant", "content": "Hello there!"} in sent
        said = await transcript(faulty, client.pc_id)
        assert said[-1]["content"] == fresh.config.default_text, "nothing leaked into it"
    finally:
        await client.close()


async def test_a_down_llm_is_reported_and_the_session_recovers_when_it_is_back(
    faulty: ServerProcess, fresh: OpenAIStub
) -> None:
    client = await connected(faulty)
    try:
        fresh.stop()  # connection refused from now on
        await turn_fails(client, "Anyone there?", "llm", "could not be reached")
        await turn_fails(client, "Still nobody?", "llm", "could not be reached")
        fresh.start()  # same port
        assert await turn_works(client, "And now?") == fresh.config.default_text
        said = await transcript(faulty, client.pc_id)
        assert [m["content"] for m in said if m["role"] == "user"] == [
            "Anyone there?",
            "Still nobody?",
            "And now?",
        ]
    finally:
        await client.close()


# -- STT and TTS ---------------------------------------------------------------------------


async def test_stt_garbage_and_an_outage_are_reported_then_speech_works_again(
    faulty: ServerProcess, fresh: OpenAIStub, audio_dir: Path
) -> None:
    speech_wav = make_speech(audio_dir, "hello-short", "Hello there.", before=0.2, after=0.8)
    client = await connected(faulty)
    try:
        fresh.script_stt(Fault.malformed())
        mark = len(client.messages)
        client.play(str(speech_wav))
        error = await next_of(client, mark, "error", within=15)
        assert error["data"]["error"].startswith("stt: ") and not error["data"]["fatal"]
        assert "bad response" in error["data"]["error"]

        fresh.stop()  # down: connection refused, for every attempt
        mark = len(client.messages)
        client.play(str(speech_wav))
        error = await next_of(client, mark, "error", within=15)
        assert error["data"]["error"].startswith("stt: ")
        assert "could not be reached" in error["data"]["error"]
        assert "user-transcription" not in client.types()[mark:]
        fresh.start()

        mark = len(client.messages)
        client.play(str(speech_wav))
        heard = await next_of(client, mark, "user-transcription", within=15)
        assert heard["data"]["text"] == fresh.config.transcript
        await next_of(client, mark, "bot-stopped-speaking", within=15)
        said = await transcript(faulty, client.pc_id)
        assert [m["role"] for m in said] == ["user", "assistant"], said
    finally:
        await client.close()


async def test_tts_faults_end_the_turn_and_keep_the_spoken_sentence(
    faulty: ServerProcess, fresh: OpenAIStub
) -> None:
    client = await connected(faulty)
    try:
        fresh.script_tts(Fault.malformed(after=0))  # a 200 that is not audio
        seen = await turn_fails(client, "Say something.", "tts", "was not audio")
        assert "bot-started-speaking" not in seen

        # The first sentence is spoken (1.8 s); the second finds the TTS down (every
        # attempt) while the first is still playing.
        fresh.config.tts_seconds_per_char = 0.15
        fresh.script_tts(None, Fault.http(503), Fault.http(503), Fault.http(503))
        await turn_fails(client, "Say it again.", "tts", "HTTP 503")
        await client.wait_for(is_type("bot-stopped-speaking"), within=5)
        said = await transcript(faulty, client.pc_id)
        assert said[-1]["role"] == "assistant" and said[-1]["content"] == "Hello there!"

        fresh.config.tts_seconds_per_char = 0.01
        assert await turn_works(client, "Once more?") == fresh.config.default_text
        said = await transcript(faulty, client.pc_id)
        assert said[-1]["content"] == fresh.config.default_text, "nothing leaked into it"
    finally:
        await client.close()


# -- the circuit breaker, end to end -------------------------------------------------------


async def test_the_breaker_opens_refuses_at_once_and_closes_after_a_probe(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub
) -> None:
    stub.reset()
    server = start_server(
        **all_stub_settings(stub, circuit_failure_threshold="2", circuit_cooldown="3")
    )
    client = await connected(server)
    try:
        stub.script_chat(Fault.http(500), Fault.http(500))
        await turn_fails(client, "One?", "llm", "HTTP 500")
        await turn_fails(client, "Two?", "llm", "HTTP 500")
        circuits = (await health(server))["circuits"]
        assert circuits["llm"]["state"] == "open", circuits
        assert circuits["stt"]["state"] == circuits["tts"]["state"] == "closed"

        started = time.monotonic()
        await turn_fails(client, "Three?", "llm", "unavailable after 2 failures in a row")
        assert len(stub.requests(CHAT)) == 2, "an open breaker sends nothing"
        refused = next(m for m in reversed(client.messages) if m["type"] == "error")
        assert "retrying in" in refused["data"]["error"]

        await asyncio.sleep(max(0.0, 3.1 - (time.monotonic() - started)))
        assert await turn_works(client, "Four?") == stub.config.default_text
        circuits = (await health(server))["circuits"]
        assert circuits["llm"]["state"] == "closed"
        assert circuits["llm"]["times_opened"] == 1
    finally:
        await client.close()
        stub.reset()
