"""Overlapping streams on the one OpenAILLM every session shares: each keeps its own
timing and its own first-token deadline (against the stub on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
import pytest

from pipeline.services.llm import LLMStream, TextDelta
from pipeline.services.openai_llm import OpenAILLM
from testkit.openai_stub import Fault, OpenAIStub, openai_stub_fixture  # noqa: F401

CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "Tell me a long story."}]
# Generous upper margin over the scripted wait: the client, the event loop and a busy
# machine add to it; the lower bound (the scripted wait itself) is exact.
MARGIN = 0.3
WORDS = 30


@dataclass
class Outcome:
    text: str
    ttfb: float | None
    duration: float | None


@pytest.fixture
async def llm(openai_stub: OpenAIStub) -> AsyncIterator[OpenAILLM]:
    service = OpenAILLM(
        "m",
        base_url=openai_stub.base_url,
        api_key=openai_stub.api_key,
        first_token_timeout=0.5,
        chunk_timeout=2.0,
    )
    openai_stub.config.default_text = "word " * WORDS
    yield service
    await service.aclose()


async def consume(stream: LLMStream) -> Outcome:
    text = "".join([c.text async for c in stream if isinstance(c, TextDelta)])
    return Outcome(text, stream.ttfb, stream.duration)


async def overlapping(
    openai_stub: OpenAIStub, llm: OpenAILLM, faults: list[Fault], gap: float
) -> list[Outcome]:
    """One stream per fault, each started ``gap`` s after the previous one's request
    reached the stub."""
    # Scripted items go to requests in arrival order, and each start waits for the
    # previous request to arrive, so stream i gets faults[i].
    openai_stub.script_chat(*faults)
    tasks: list[asyncio.Task[Outcome]] = []
    for count in range(1, len(faults) + 1):
        tasks.append(asyncio.create_task(consume(llm.stream(USER))))
        assert await openai_stub.wait_for(lambda n=count: len(openai_stub.requests(CHAT)) >= n)
        await asyncio.sleep(gap)
    return await asyncio.gather(*tasks)


def late_first_token(seconds: float) -> Fault:
    return Fault.stall(seconds, after=0)


def late_finish(seconds: float) -> Fault:
    """The whole text at once, then a pause before the finish chunk: the stream ends
    with chunks that carry no text, long after its first-token deadline."""
    return Fault.stall(seconds, after=WORDS)


def check(outcomes: list[Outcome], faults: list[Fault], text: str) -> None:
    for fault, outcome in zip(faults, outcomes, strict=True):
        wait = fault.seconds if fault.after == 0 else 0.0
        assert outcome.text == text
        assert outcome.ttfb is not None and outcome.duration is not None
        assert wait <= outcome.ttfb < wait + MARGIN, (fault, outcome)
        assert outcome.duration > outcome.ttfb


async def test_two_overlapping_streams_keep_their_own_ttfb(
    openai_stub: OpenAIStub, llm: OpenAILLM
) -> None:
    # The first stream is past its first-token deadline (0.5 s) and waiting for its
    # finish chunk when the second starts; the second's first token takes 0.4 s.
    faults = [late_finish(0.6), late_first_token(0.4)]
    outcomes = await overlapping(openai_stub, llm, faults, gap=0.6)
    check(outcomes, faults, openai_stub.config.default_text)


async def test_ten_overlapping_streams_keep_their_own_ttfb(
    openai_stub: OpenAIStub, llm: OpenAILLM
) -> None:
    openai_stub.config.token_delay = 0.02
    faults = [late_first_token(0.1 + 0.03 * i) if i % 2 else late_finish(0.7) for i in range(10)]
    outcomes = await overlapping(openai_stub, llm, faults, gap=0.2)
    check(outcomes, faults, openai_stub.config.default_text)


async def test_a_closed_stream_has_a_duration_and_no_first_token(
    openai_stub: OpenAIStub, llm: OpenAILLM
) -> None:
    openai_stub.script_chat(Fault.stall(5, after=0))
    stream = llm.stream(USER)
    task = asyncio.create_task(anext(stream))
    assert await openai_stub.wait_for(lambda: len(openai_stub.requests(CHAT)) == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await stream.aclose()
    assert stream.ttfb is None and stream.duration is not None


# -- a pause between chunks that carry no text --------------------------------------------
# The stub sends the finish and usage chunks together; a real provider may not (they can
# arrive in separate packets). This fake, at the provider edge, pauses between them.


def _sse(delta: dict[str, Any] | None, finish: str | None = None, usage: bool = False) -> bytes:
    chunk: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "created": 0}
    chunk["model"] = "m"
    chunk["choices"] = (
        [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    )
    if usage:
        chunk["usage"] = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    return f"data: {json.dumps(chunk)}\n\n".encode()


def paced_provider(script: dict[str, list[tuple[float, bytes]]]) -> openai.AsyncOpenAI:
    """A client whose provider answers the user message ``key`` with ``script[key]``:
    ``(pause before, SSE bytes)`` pairs."""

    async def body(events: list[tuple[float, bytes]]) -> AsyncIterator[bytes]:
        for pause, data in events:
            await asyncio.sleep(pause)
            yield data
        yield b"data: [DONE]\n\n"

    async def handle(request: httpx2.Request) -> httpx2.Response:
        key = json.loads(request.content)["messages"][-1]["content"]
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, headers=headers, content=body(script[key]))

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handle))
    return openai.AsyncOpenAI(api_key="sk-fake", base_url="http://provider/v1", http_client=http)


async def test_a_stream_ending_while_another_waits_for_its_first_token() -> None:
    role = _sse({"role": "assistant", "content": ""})
    finish, usage = _sse({}, "stop"), _sse(None, usage=True)
    script = {
        # A: its text at once, the finish chunk at 0.8 s, the usage chunk at 1.0 s.
        "A": [(0, role), (0, _sse({"content": "Hi."})), (0.8, finish), (0.2, usage)],
        # B starts at 0.6 s; its first token comes 0.4 s later, after A's finish chunk.
        "B": [(0, role), (0.4, _sse({"content": "Yes."})), (0, finish), (0, usage)],
    }
    client = paced_provider(script)
    llm = OpenAILLM("m", client=client, first_token_timeout=0.5, chunk_timeout=2.0)
    a = llm.stream([{"role": "user", "content": "A"}])
    first = asyncio.create_task(consume(a))
    await asyncio.sleep(0.6)
    b = llm.stream([{"role": "user", "content": "B"}])
    outcomes = await asyncio.gather(first, consume(b))
    assert [o.text for o in outcomes] == ["Hi.", "Yes."]
    assert a.ttfb is not None and a.ttfb < MARGIN
    assert b.ttfb is not None and 0.4 <= b.ttfb < 0.4 + MARGIN
    assert a.duration is not None and a.duration >= 1.0
    await client.close()
