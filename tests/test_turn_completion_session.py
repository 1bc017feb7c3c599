"""``PARLEY_TURN_COMPLETION`` in a running server: the LLM marks each answer ✓ ○ ◐; an
answer marked incomplete is not spoken, and the LLM is asked again after the timeout.

A real server (subprocess) with every model at the OpenAI-compatible stub, and the aiortc
test client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from pipeline.reply.turn_completion import COMPLETE, INCOMPLETE_SHORT, MARKERS
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient, checked_client
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
REPROMPT = "The user paused mid-sentence"  # the start of the short re-prompt


def is_type(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("type") == name


def of_type(client: RTCTestClient, name: str) -> list[dict[str, Any]]:
    return [m for m in client.messages if m.get("type") == name]


@pytest.fixture(scope="module")
def completion_server(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub
) -> ServerProcess:
    return start_server(
        **stub.server_settings(turn_completion="true", turn_completion_short_timeout="1.0")
    )


@pytest.fixture
async def client(
    completion_server: ServerProcess, stub: OpenAIStub
) -> AsyncIterator[RTCTestClient]:
    async with checked_client(completion_server.url, stub) as connected:
        yield connected


async def test_incomplete_turn_is_not_answered_then_re_prompted(
    client: RTCTestClient, stub: OpenAIStub
) -> None:
    stub.script_chat(INCOMPLETE_SHORT, f"{COMPLETE} Take your time, go on.")
    client.send_rtvi("send-text", {"content": "I would like to book a table for"})
    await client.wait_for(is_type("bot-llm-stopped"), within=10)
    suppressed_at = time.monotonic()
    first = stub.requests(CHAT)[0].body["messages"]
    assert first[0]["role"] == "system" and all(m in first[0]["content"] for m in MARKERS)

    output = await client.wait_for(is_type("bot-output"), within=10)
    assert time.monotonic() - suppressed_at >= 0.8, "the re-prompt waits for the timeout"
    assert output["data"]["text"] == "Take your time, go on."
    await client.wait_for(is_type("bot-stopped-speaking"), within=10)

    requests = stub.requests(CHAT)
    assert len(requests) == 2
    assert any(
        m["role"] == "system" and m["content"].startswith(REPROMPT)
        for m in requests[1].body["messages"]
    )
    assert len(of_type(client, "bot-started-speaking")) == 1, "the ○ answer was silent"
    texts = ("bot-llm-text", "bot-output", "bot-tts-text")
    seen = [m["data"]["text"] for m in client.messages if m.get("type") in texts]
    assert not any(marker in text for text in seen for marker in MARKERS)


async def test_user_going_on_cancels_the_re_prompt(client: RTCTestClient, stub: OpenAIStub) -> None:
    stub.script_chat(INCOMPLETE_SHORT, f"{COMPLETE} Four people at eight, noted.")
    client.send_rtvi("send-text", {"content": "A table for"})
    await client.wait_for(is_type("bot-llm-stopped"), within=10)
    client.send_rtvi("send-text", {"content": "four people at eight."})
    await client.wait_for(is_type("bot-stopped-speaking"), within=10)
    await asyncio.sleep(1.5)  # past the re-prompt timeout
    requests = stub.requests(CHAT)
    assert len(requests) == 2, "no re-prompt once the user went on"
    assert not any(
        m["role"] == "system" and m["content"].startswith(REPROMPT)
        for m in requests[1].body["messages"]
    )
