"""Typed turns (issue 22, item 9): send-text gathered like spoken turns, one LLM request a
burst, and a per-session budget of typed answers.

The conversation is real with a scripted LLM that counts its requests; then one real
server with every model at the OpenAI-compatible stub.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from pipeline.context.llm_context import LLMContext
from pipeline.conversation import Conversation
from pipeline.events import Event, UserTurnMerged
from pipeline.messages import SystemMessage, UserMessage
from pipeline.services.llm import LLMChunk, TextDelta
from pipeline.turns.merge import TypedTextRefused, TypedTurnParams, TypedTurns
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

CHAT = "/v1/chat/completions"


class CountingLLM:
    """Streams a short answer after ``delay`` s; records every request."""

    supports_tools = False

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.requests: list[list[dict[str, Any]]] = []

    async def stream(
        self, messages: list[dict[str, Any]], tools: Any = None, tool_choice: Any = None
    ) -> AsyncIterator[LLMChunk]:
        self.requests.append(messages)
        await asyncio.sleep(self.delay)
        for word in ("Fine,", "thanks."):
            yield TextDelta(word + " ")


def typed(
    llm: CountingLLM, clock: Callable[[], float] = time.monotonic, **params: Any
) -> tuple[Conversation, TypedTurns, list[Event]]:
    conversation = Conversation(LLMContext([SystemMessage("Be brief.")]), llm)  # type: ignore[arg-type]
    seen: list[Event] = []
    conversation.events.on(UserTurnMerged, seen.append)
    params_ = TypedTurnParams(**params)
    turns = TypedTurns(conversation, conversation.events.emit, params_, clock=clock)
    turns.attach(conversation.events)
    return conversation, turns, seen


def user_texts(conversation: Conversation) -> list[str]:
    return [m.text_content() for m in conversation.context.messages if isinstance(m, UserMessage)]


async def settle(conversation: Conversation, seconds: float = 0.4) -> None:
    await asyncio.sleep(seconds)
    await conversation.close()


async def test_a_burst_of_texts_is_one_turn_and_one_request() -> None:
    llm = CountingLLM()
    conversation, turns, _ = typed(llm, window=0.1)
    for i in range(8):
        turns.add(f"part {i}")
    await settle(conversation)
    assert len(llm.requests) == 1
    assert user_texts(conversation) == ["\n".join(f"part {i}" for i in range(8))]


async def test_a_text_while_the_answer_is_prepared_joins_that_turn() -> None:
    llm = CountingLLM(delay=0.3)  # the LLM thinks before its first token
    conversation, turns, merged = typed(llm, window=0.05)
    turns.add("What is the capital")
    await asyncio.sleep(0.15)  # sent; nothing of the answer shown yet
    assert len(llm.requests) == 1
    turns.add("of Norway?")
    await settle(conversation, 0.8)
    assert len(llm.requests) == 2
    assert user_texts(conversation) == ["What is the capital\nof Norway?"]
    assert llm.requests[1][-1] == {"role": "user", "content": "What is the capital\nof Norway?"}
    assert [(e.user_text, e.assistant_text) for e in merged] == [("What is the capital", "")]  # type: ignore[attr-defined]


async def test_a_text_after_the_answer_showed_is_a_turn_of_its_own() -> None:
    llm = CountingLLM()
    conversation, turns, merged = typed(llm, window=0.05)
    turns.add("Hello.")
    await asyncio.sleep(0.3)
    turns.add("How are you?")
    await settle(conversation)
    assert len(llm.requests) == 2 and not merged
    assert user_texts(conversation) == ["Hello.", "How are you?"]


async def test_the_burst_budget_refuses_with_a_reason_and_refills() -> None:
    clock = [0.0]
    llm = CountingLLM()
    conversation, turns, _ = typed(llm, lambda: clock[0], window=0.05, rate=0.5, burst=3)
    for _ in range(3):
        turns.add("again")
    with pytest.raises(TypedTextRefused, match=r"too many typed turns \(0.5 per second, 3 at"):
        turns.add("again")
    clock[0] = 2.0  # one more token
    turns.add("later")
    assert turns.refused == 1
    turns.add("queued, asks for nothing", run_immediately=False)  # never refused
    await settle(conversation)


async def test_texts_that_ask_for_nothing_go_in_at_once_or_join_the_turn() -> None:
    llm = CountingLLM()
    conversation, turns, _ = typed(llm, window=0.1)
    turns.add("Note one.", run_immediately=False)
    assert user_texts(conversation) == ["Note one."] and not llm.requests
    turns.add("Question?")
    turns.add("Note two.", run_immediately=False)
    await settle(conversation)
    assert user_texts(conversation) == ["Note one.", "Question?\nNote two."]
    assert len(llm.requests) == 1


async def test_a_turn_never_grows_past_the_longest_text() -> None:
    llm = CountingLLM()
    conversation, turns, _ = typed(llm, window=0.1, max_chars=100)
    for _ in range(5):
        turns.add("x" * 60)
    await settle(conversation, 0.6)
    assert all(len(text) <= 100 for text in user_texts(conversation))
    assert len(user_texts(conversation)) == 5


async def test_window_zero_answers_at_once_and_close_keeps_what_waits() -> None:
    llm = CountingLLM()
    conversation, turns, _ = typed(llm, window=0.0)
    turns.add("Now.")
    await asyncio.sleep(0)
    assert user_texts(conversation) == ["Now."]
    later = CountingLLM()
    conversation2, turns2, _ = typed(later, window=5.0)
    turns2.add("Typed as the call ended.")
    turns2.close()
    assert user_texts(conversation2) == ["Typed as the call ended."] and not later.requests
    await settle(conversation, 0.2)
    await conversation2.close()


# -- a real server ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def typed_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    return start_server(**stub.server_settings(typed_turn_burst="5"))


@pytest.mark.e2e
async def test_forty_texts_in_a_burst_cost_a_few_requests_and_the_rest_are_refused(
    typed_server: ServerProcess, stub: OpenAIStub
) -> None:
    """Before: every send-text interrupted and asked again (40 texts, 57 requests)."""
    stub.reset()
    async with RTCTestClient(typed_server.url) as client:
        ids = []
        for i in range(40):
            options = {"audio_response": False}
            ids.append(client.send_rtvi("send-text", {"content": f"Q{i}?", "options": options}))
            await asyncio.sleep(0.02)
        await client.wait_for(lambda m: m.get("type") == "bot-llm-stopped", within=15)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until no request has come for a second
            seen = len(stub.requests(CHAT))
            await asyncio.sleep(1.0)
            if len(stub.requests(CHAT)) == seen:
                break
    refused = [
        m for m in client.messages if m.get("type") == "error-response" and m.get("id") in ids
    ]
    assert len(refused) >= 30, "past the burst of 5 (and a refill of 1 a second)"
    assert all("too many typed turns" in m["data"]["error"] for m in refused)
    requests = stub.requests(CHAT)
    assert 1 <= len(requests) <= 3, [r.body["messages"][-1] for r in requests]
    # The last request holds the whole conversation. On a loaded machine the 40 sends take
    # over a second, so a refilled token may admit a late text as a turn of its own after
    # the burst's: the burst is then the user turn before it, still one turn.
    said = [m["content"] for m in requests[-1].body["messages"] if m["role"] == "user"]
    assert any(text.startswith("Q0?\nQ1?\nQ2?") for text in said), said  # one user turn
    assert sum(text.startswith("Q0?") for text in said) == 1, said
