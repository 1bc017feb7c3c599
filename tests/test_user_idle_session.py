"""``PARLEY_USER_IDLE_TIMEOUT`` in a running server: the client is told, the LLM checks in
("Are you still there?"), and after ``PARLEY_USER_IDLE_CHECK_INS`` unanswered check-ins
the bot says goodbye and ends the call.

A real server (subprocess) with every model at the OpenAI-compatible stub, and the aiortc
test client that never speaks (or answers once).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
GOODBYE = "Goodbye for now."


def idle_messages(client: RTCTestClient) -> list[dict[str, Any]]:
    return [
        m["data"]
        for m in client.messages
        if m.get("type") == "server-message" and m["data"].get("type") == "user-idle"
    ]


def check_in_prompts(stub: OpenAIStub) -> int:
    """How many chat requests ended with the idle check-in instruction."""
    return sum(
        1
        for r in stub.requests(CHAT)
        if r.body["messages"][-1]["role"] == "system"
        and "silent" in r.body["messages"][-1]["content"]
    )


@pytest.fixture(scope="module")
def idle_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    return start_server(
        **stub.server_settings(
            greeting="Hi.",
            user_idle_timeout="1.0",
            user_idle_check_ins="2",
            user_idle_goodbye=GOODBYE,
        )
    )


async def test_unanswered_check_ins_end_the_call(
    idle_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    stub.script_chat("Are you still there?", "Hello? Still with me?")
    client = RTCTestClient(idle_server.url)
    try:
        await client.connect()
        left = await client.wait_for(
            lambda m: m.get("message", {}).get("type") == "peerLeft", within=30
        )
        assert left
        told = idle_messages(client)
        assert [(m["idle_count"], m["ending"]) for m in told] == [(1, False), (2, False), (3, True)]
        assert all(m["idle_seconds"] == 1.0 for m in told)
        assert check_in_prompts(stub) == 2
        spoken = [m["data"]["text"] for m in client.messages if m.get("type") == "bot-output"]
        assert " ".join(spoken) == f"Hi. Are you still there? Hello? Still with me? {GOODBYE}"
        client.assert_valid_rtvi()
        async with httpx.AsyncClient(base_url=idle_server.url) as http:
            for _ in range(50):
                if (await http.get(f"/api/sessions/{client.pc_id}")).status_code == 404:
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("the idle session is still there")
            record = (await http.get(f"/api/sessions/{client.pc_id}/transcript")).json()
            assert record["close_reason"] == "user idle"
    finally:
        await client.close()
        stub.reset()


async def test_an_answer_resets_the_check_ins(idle_server: ServerProcess, stub: OpenAIStub) -> None:
    stub.reset()
    stub.script_chat("Are you still there?", "Good, go on.", "Anyone there?")
    client = RTCTestClient(idle_server.url)
    try:
        await client.connect()
        await client.wait_for(
            lambda m: m.get("type") == "server-message" and m["data"].get("idle_count") == 1,
            within=10,
        )
        await client.wait_for(
            lambda m: m.get("type") == "bot-output" and m["data"]["text"].startswith("Are you"),
            within=10,
        )
        client.send_rtvi("send-text", {"content": "Yes, I am here."})
        await client.wait_for(
            lambda m: m.get("type") == "bot-output" and m["data"]["text"] == "Good, go on.",
            within=10,
        )
        await client.wait_for(
            lambda m: m.get("type") == "bot-output" and m["data"]["text"] == "Anyone there?",
            within=10,
        )
        told = idle_messages(client)
        assert [m["idle_count"] for m in told] == [1, 1], "the answer started the count again"
        assert not any(m["ending"] for m in told)
    finally:
        await client.close()
        stub.reset()
