"""FallbackLLM: an LLM that fails before its answer begins hands the same messages to the
next (here Claude, through Anthropic's fake); one that fails mid-answer does not. The
OpenAI-compatible stub and the Anthropic stub stand in for the providers on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from pipeline.services.anthropic_llm import AnthropicLLM
from pipeline.services.circuit import CircuitBreaker, CircuitState
from pipeline.services.errors import ServiceError
from pipeline.services.fallback_llm import FallbackLLM
from pipeline.services.llm import TextDelta, ToolCallRequest
from pipeline.services.openai_llm import OpenAILLM
from testkit.anthropic_stub import AnthropicStub, Reply, ToolUse
from testkit.openai_stub import Fault, OpenAIStub, openai_stub_fixture  # noqa: F401

USER = [{"role": "user", "content": "Where is my order A-1234?"}]
TOOLS = [{"type": "function", "function": {"name": "get_order", "description": "An order.",
          "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}]  # fmt: skip


@pytest.fixture
def claude() -> Iterator[AnthropicStub]:
    with AnthropicStub() as stub:
        yield stub


@pytest.fixture
async def chain(
    openai_stub: OpenAIStub, claude: AnthropicStub
) -> AsyncIterator[tuple[FallbackLLM, CircuitBreaker]]:
    breaker = CircuitBreaker("llm", threshold=1, cooldown=60)
    first = OpenAILLM("m", base_url=openai_stub.base_url, api_key="sk-stub", breaker=breaker)
    second = AnthropicLLM("claude-x", base_url=claude.url, api_key=claude.api_key)
    yield FallbackLLM([first, second], ["openai", "anthropic"]), breaker
    await first.aclose()
    await second.aclose()


async def text(llm: FallbackLLM) -> str:
    stream = llm.stream(USER, TOOLS)
    return "".join([c.text async for c in stream if isinstance(c, TextDelta)])


async def test_a_failing_llm_hands_the_same_messages_to_the_next(
    openai_stub: OpenAIStub, claude: AnthropicStub,
    chain: tuple[FallbackLLM, CircuitBreaker],
) -> None:  # fmt: skip
    llm, _breaker = chain
    openai_stub.script_chat(Fault.http(503))
    claude.script(Reply(tool_calls=(ToolUse("get_order", {"id": "A-1234"}),)))
    stream = llm.stream(USER, TOOLS)
    chunks = [c async for c in stream]
    calls = [c for c in chunks if isinstance(c, ToolCallRequest)]
    assert [(c.name, c.arguments) for c in calls] == [("get_order", {"id": "A-1234"})]
    assert stream.finish_reason == "tool_calls" and stream.ttfb is not None
    asked = claude.requests[-1].body
    assert asked["messages"][-1]["content"] in ("Where is my order A-1234?",
        [{"type": "text", "text": "Where is my order A-1234?"}])  # fmt: skip
    assert [t["name"] for t in asked["tools"]] == ["get_order"]
    assert llm.serving == "anthropic" and llm.answered == 1


async def test_an_open_breaker_goes_to_the_next_without_a_request(
    openai_stub: OpenAIStub, claude: AnthropicStub,
    chain: tuple[FallbackLLM, CircuitBreaker],
) -> None:  # fmt: skip
    llm, breaker = chain
    openai_stub.script_chat(Fault.http(500))
    claude.script("First.", "Second.")
    assert await text(llm) == "First."
    assert breaker.state is CircuitState.OPEN
    assert await text(llm) == "Second."
    assert len(openai_stub.requests("/v1/chat/completions")) == 1


async def test_a_failure_after_the_answer_began_is_the_turns(
    openai_stub: OpenAIStub, claude: AnthropicStub,
    chain: tuple[FallbackLLM, CircuitBreaker],
) -> None:  # fmt: skip
    llm, _breaker = chain
    openai_stub.script_chat(Fault.cut(after=1))
    with pytest.raises(ServiceError):
        await text(llm)
    assert claude.requests == [], "words already spoken are not said again by another"


async def test_the_first_llm_serves_while_it_works(
    openai_stub: OpenAIStub, chain: tuple[FallbackLLM, CircuitBreaker]
) -> None:
    llm, _breaker = chain
    assert await text(llm) == openai_stub.config.default_text
    assert llm.serving == "openai" and llm.answered == 0
