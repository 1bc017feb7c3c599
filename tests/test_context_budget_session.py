"""The context's size in a running server: summarized at its token budget, never sent
larger than ``PARLEY_CONTEXT_MAX_TOKENS``, and summarized on request (RTVI
``client-message`` ``summarize-context``, ``POST /api/sessions/{pc_id}/summarize``).

A real server (subprocess) with every model at the OpenAI-compatible stub, and the aiortc
test client typing a long conversation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from pipeline.context.llm_context import LLMContext, estimate_tokens
from pipeline.messages import SystemMessage
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
MAX_TOKENS = 400
SUMMARY_MAX_TOKENS = 120
# About 80 estimated tokens a message: the budget holds four or five of them.
FILLER = "I also want to mention that the weather was lovely and the train was on time. "


def history_tokens(messages: list[dict[str, Any]]) -> int:
    """Estimated tokens of what was sent after the system prompt (the budget's measure)."""
    typed = LLMContext(messages).messages
    return estimate_tokens([m for m in typed if not isinstance(m, SystemMessage)])


def answers(stub: OpenAIStub) -> list[dict[str, Any]]:
    return [r.body for r in stub.requests(CHAT) if r.body.get("stream")]


def summaries(stub: OpenAIStub) -> list[dict[str, Any]]:
    return [r.body for r in stub.requests(CHAT) if not r.body.get("stream")]


async def converse(client: RTCTestClient, turns: int, start: int = 0) -> None:
    """Typed turns answered in text (quick), each waited for."""
    for i in range(start, start + turns):
        done = len([m for m in client.messages if m.get("type") == "bot-llm-stopped"])
        content = f"Turn {i}. {FILLER * 4}"
        client.send_rtvi("send-text", {"content": content, "options": {"audio_response": False}})
        await client.wait_for(
            lambda m, n=done: (
                m.get("type") == "bot-llm-stopped"
                and len([x for x in client.messages if x.get("type") == "bot-llm-stopped"]) > n
            ),
            within=10,
        )


async def connected(url: str) -> RTCTestClient:
    client = RTCTestClient(url)
    await client.connect()
    return client


@pytest.fixture
async def auto_client(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub
) -> AsyncIterator[RTCTestClient]:
    settings = stub.server_settings(
        context_max_tokens=str(MAX_TOKENS), context_summary_max_tokens=str(SUMMARY_MAX_TOKENS)
    )
    stub.reset()
    client = await connected(start_server(**settings).url)
    yield client
    await client.close()


@pytest.fixture(scope="module")
def off_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    return start_server(
        **stub.server_settings(context_max_tokens=str(MAX_TOKENS), context_summarization="off")
    )


@pytest.fixture
async def off_client(off_server: ServerProcess, stub: OpenAIStub) -> AsyncIterator[RTCTestClient]:
    stub.reset()
    client = await connected(off_server.url)
    yield client
    await client.close()


async def test_long_conversation_is_summarized_within_the_budget(
    auto_client: RTCTestClient, stub: OpenAIStub
) -> None:
    stub.config.default_text = "Noted, thank you."
    await converse(auto_client, 14)

    sent = answers(stub)
    assert len(sent) == 14
    sizes = [history_tokens(body["messages"]) for body in sent]
    assert max(sizes) <= MAX_TOKENS, sizes
    made = summaries(stub)
    assert made, "the budget started a summary"
    assert all(body["max_tokens"] == SUMMARY_MAX_TOKENS for body in made)
    last = sent[-1]["messages"]
    assert any(str(m.get("content", "")).startswith("Conversation summary:") for m in last)
    assert last[-1] == {"role": "user", "content": f"Turn 13. {FILLER * 4}"}


async def test_without_summaries_the_oldest_messages_make_room(
    off_client: RTCTestClient, stub: OpenAIStub
) -> None:
    await converse(off_client, 10)
    sent = answers(stub)
    sizes = [history_tokens(body["messages"]) for body in sent]
    assert max(sizes) <= MAX_TOKENS, sizes
    assert sizes[-1] > MAX_TOKENS // 2, "only what did not fit was dropped"
    assert not summaries(stub)
    last = sent[-1]["messages"]
    assert last[0]["role"] == "system" and last[1]["role"] in ("user", "assistant")
    assert last[-1]["content"] == f"Turn 9. {FILLER * 4}"


async def test_summary_on_request(
    off_client: RTCTestClient, off_server: ServerProcess, stub: OpenAIStub
) -> None:
    await converse(off_client, 3)
    stub.script_chat("The user talked about the weather and the train.")
    reply = await off_client.request("summarize-context")
    assert reply["type"] == "server-response", reply
    d = reply["data"]["d"]
    assert d["status"] == "applied" and d["summarized_messages"] == 2
    assert d["tokens_after"] < d["tokens_before"]
    assert summaries(stub)[-1]["max_tokens"] == 1000  # the default summary budget

    await converse(off_client, 1, start=3)
    last = answers(stub)[-1]["messages"]
    assert last[1] == {
        "role": "user",
        "content": "Conversation summary: The user talked about the weather and the train.",
    }

    async with httpx.AsyncClient(base_url=off_server.url) as http:
        again = await http.post(f"/api/sessions/{off_client.pc_id}/summarize")
        assert again.status_code == 200
        assert again.json()["pc_id"] == off_client.pc_id
        assert again.json()["status"] in ("applied", "nothing-to-summarize")
        missing = await http.post("/api/sessions/nope/summarize")
        assert missing.status_code == 404 and "error" in missing.json()
