"""AnthropicLLM through the official ``anthropic`` SDK against the fake Messages API on
127.0.0.1 (testkit/anthropic_stub.py): the SDK parsing the fake's events is what shows
the fake faithful, and the fake's request checks what shows the conversion right."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import pytest

from pipeline.services.anthropic_llm import AnthropicLLM
from pipeline.services.anthropic_messages import OPENING, to_messages
from pipeline.services.circuit import CircuitBreaker, ServiceUnavailableError
from pipeline.services.errors import (
    ServiceAuthError,
    ServiceBadResponseError,
    ServiceError,
    ServiceHTTPError,
    ServiceRateLimitError,
    ServiceTimeoutError,
    ServiceUnreachableError,
)
from pipeline.services.llm import ReasoningDelta, TextDelta, ToolCallRequest, UsageReport
from testkit.anthropic_stub import (
    AnthropicStub,
    Fault,
    Reply,
    ToolUse,
    anthropic_stub_fixture,  # noqa: F401  (provides the ``anthropic_stub`` fixture)
)

SYSTEM = {"role": "system", "content": "You are a helpful voice assistant."}
USER = [SYSTEM, {"role": "user", "content": "What is the weather like in Paris today?"}]
CACHED = {"type": "ephemeral"}
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": WEATHER_SCHEMA,
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
    },
]
FORCED = {"type": "function", "function": {"name": "get_time"}}
# A tiny JPEG's first bytes, base64: enough for a block, never decoded.
JPEG = "/9j/4AAQSkZJRgABAQ=="


@pytest.fixture
async def make(anthropic_stub: AnthropicStub) -> AsyncIterator[Callable[..., AnthropicLLM]]:
    """Builds services pointed at the fake (short timeouts) and closes them afterwards."""
    made: list[AnthropicLLM] = []

    def factory(model: str = "claude-stub", **kwargs: Any) -> AnthropicLLM:
        kwargs.setdefault("base_url", anthropic_stub.url)
        kwargs.setdefault("api_key", anthropic_stub.api_key)
        kwargs.setdefault("first_token_timeout", 3.0)
        kwargs.setdefault("chunk_timeout", 3.0)
        llm = AnthropicLLM(model, **kwargs)
        made.append(llm)
        return llm

    yield factory
    for llm in made:
        await llm.aclose()


async def collect(llm: AnthropicLLM, messages: Any = None, *args: Any) -> list[Any]:
    return [chunk async for chunk in llm.stream(messages or USER, *args)]


def text_of(chunks: list[Any]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


def sent(stub: AnthropicStub) -> dict[str, Any]:
    """The body of the last request the fake got."""
    body: dict[str, Any] = stub.requests[-1].body
    return body


# -- streaming -------------------------------------------------------------------------------


async def test_streams_text_deltas_and_measures_ttfb(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    anthropic_stub.script(Reply("Sunny and mild, about twenty degrees.", first_delay=0.2))
    stream = make().stream(USER)
    assert stream.ttfb is None and stream.duration is None
    chunks = [chunk async for chunk in stream]
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == [
        "Sunny ", "and ", "mild, ", "about ", "twenty ", "degrees.",
    ]  # fmt: skip
    assert isinstance(chunks[-1], UsageReport)
    assert stream.ttfb is not None and stream.duration is not None
    assert 0.2 <= stream.ttfb < 2.0  # the delayed first event, not the headers
    assert stream.duration >= stream.ttfb
    assert stream.finish_reason == "stop"
    record = anthropic_stub.requests[-1]
    assert record.completed and not record.disconnected
    assert record.body["model"] == "claude-stub" and record.body["stream"] is True
    assert record.body["max_tokens"] == 1024  # the API requires one
    assert record.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": USER[1]["content"]}]}
    ]
    assert record.body["system"] == [{"type": "text", "text": SYSTEM["content"],
                                      "cache_control": CACHED}]  # fmt: skip
    assert record.headers["anthropic-version"]
    assert "tools" not in record.body and "thinking" not in record.body


async def test_the_given_max_tokens_is_sent(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    await collect(make(max_tokens=64))
    assert sent(anthropic_stub)["max_tokens"] == 64


async def test_a_tool_call_split_in_many_fragments(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    where = {"city": "Paris", "unit": "celsius", "note": "a long value, in many pieces", "n": 3}
    anthropic_stub.script(Reply("Let me check.", (ToolUse("get_weather", where),), fragment=3))
    llm = make()
    stream = llm.stream(USER, TOOLS)
    chunks = [chunk async for chunk in stream]
    calls = [c for c in chunks if isinstance(c, ToolCallRequest)]
    assert calls == [ToolCallRequest("toolu_stub_0", "get_weather", where)]
    assert stream.finish_reason == "tool_calls"
    assert text_of(chunks) == "Let me check."
    # Text first, the call once the message has ended, usage last.
    last_text = max(i for i, c in enumerate(chunks) if isinstance(c, TextDelta))
    assert chunks.index(calls[0]) > last_text
    assert isinstance(chunks[-1], UsageReport)
    tools = sent(anthropic_stub)["tools"]
    assert [t["name"] for t in tools] == ["get_weather", "get_time"]
    assert tools[0] == {"name": "get_weather", "description": "Weather for a city.",
                        "input_schema": WEATHER_SCHEMA}  # fmt: skip
    assert tools[1]["cache_control"] == CACHED  # the last tool: the tools are cached


async def test_two_tool_calls_in_order(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    calls = (ToolUse("get_weather", {"city": "Oslo"}, id="toolu_a"), ToolUse("get_time", id="b"))
    anthropic_stub.script(Reply(tool_calls=calls))
    chunks = await collect(make(), USER, TOOLS)
    assert [c for c in chunks if isinstance(c, ToolCallRequest)] == [
        ToolCallRequest("toolu_a", "get_weather", {"city": "Oslo"}),
        ToolCallRequest("b", "get_time", {}),  # empty arguments: {}
    ]
    assert not any(isinstance(c, TextDelta) for c in chunks)


async def test_invalid_tool_arguments_are_a_bad_response(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    anthropic_stub.script(Reply(tool_calls=(ToolUse("get_weather", '{"city": "Par'),)))
    with pytest.raises(ServiceBadResponseError, match="'get_weather' are not a valid JSON"):
        await collect(make(), USER, TOOLS)


async def test_a_follow_up_turn_sends_tool_use_and_tool_result_blocks(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    context = [
        *USER,
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "toolu_2", "type": "function",
             "function": {"name": "get_time", "arguments": ""}},
        ]},
        {"role": "developer", "content": "Keep it short."},  # lands before the results
        {"role": "tool", "tool_call_id": "toolu_1", "content": '{"sky": "clear"}'},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "14:05"},
        {"role": "user", "content": "And tomorrow?"},
    ]  # fmt: skip
    anthropic_stub.script("Clear today; tomorrow I'd have to check.")
    chunks = await collect(make(), context, TOOLS, "auto")
    assert text_of(chunks) == "Clear today; tomorrow I'd have to check."
    body = sent(anthropic_stub)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}},
    ]
    # The results and the words after them in one user message, the results first.
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"sky": "clear"}'},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "14:05"},
        {"type": "text", "text": "[system] Keep it short."},
        {"type": "text", "text": "And tomorrow?"},
    ]
    assert body["system"][-1]["cache_control"] == CACHED
    assert body["tools"][-1]["cache_control"] == CACHED
    assert body["tool_choice"] == {"type": "auto"}


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        (FORCED, {"type": "tool", "name": "get_time"}),
    ],
)
async def test_tool_choice_in_anthropic_terms(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM], choice: Any, wire: Any
) -> None:
    await collect(make(), USER, TOOLS, choice)
    assert sent(anthropic_stub)["tool_choice"] == wire


async def test_without_tool_support_past_calls_are_sent_as_text(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    context = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "rain"},
    ]  # fmt: skip
    await collect(make(supports_tools=False), context, TOOLS, "required")
    body = sent(anthropic_stub)  # the fake refuses tool blocks without tools
    assert "tools" not in body and "tool_choice" not in body
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": '(tool call: get_weather {"city": "Rome"})'}
    ]
    assert body["messages"][2]["content"] == [{"type": "text", "text": "(tool result: rain)"}]


async def test_images_become_image_blocks(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    context = [{"role": "user", "content": [
        {"type": "text", "text": "What do you see?"},
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    ]}]  # fmt: skip
    await collect(make(), context)
    assert sent(anthropic_stub)["messages"][0]["content"] == [
        {"type": "text", "text": "What do you see?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": JPEG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
    ]
    assert "system" not in sent(anthropic_stub)


async def test_thinking_is_reasoning_never_text(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    thought = "The user asks about weather; answer briefly."
    anthropic_stub.script(Reply("It is sunny.", thinking=thought))
    chunks = await collect(make(thinking_budget=2000))
    reasoning = [c for c in chunks if isinstance(c, ReasoningDelta)]
    assert "".join(c.text for c in reasoning) == thought and len(reasoning) > 1
    assert text_of(chunks) == "It is sunny."
    assert chunks.index(reasoning[-1]) < min(
        i for i, c in enumerate(chunks) if isinstance(c, TextDelta)
    )
    body = sent(anthropic_stub)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    assert body["max_tokens"] == 1024 + 2000  # the budget counts within max_tokens


async def test_thinking_goes_back_with_its_tool_calls(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    """With thinking on, the API wants the signed thinking back in front of the calls
    (the fake refuses the follow-up otherwise, as the API does)."""
    anthropic_stub.script(
        Reply(tool_calls=(ToolUse("get_time", id="toolu_t"),), thinking="Need the time."),
        "It is two o'clock.",
    )
    llm = make(thinking_budget=1500)
    calls = [c for c in await collect(llm, USER, TOOLS) if isinstance(c, ToolCallRequest)]
    assert calls == [ToolCallRequest("toolu_t", "get_time", {})]
    follow_up = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "toolu_t", "type": "function",
             "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "toolu_t", "content": "14:00"},
    ]  # fmt: skip
    assert text_of(await collect(llm, follow_up, TOOLS)) == "It is two o'clock."
    body = sent(anthropic_stub)
    assert body["messages"][1]["content"][0] == {
        "type": "thinking", "thinking": "Need the time.", "signature": "sig-stub",
    }  # fmt: skip
    assert "thinking" in body
    # Another service never saw those calls: no thought to send, so no thinking asked for.
    await collect(make(thinking_budget=1500), follow_up, TOOLS)
    assert "thinking" not in sent(anthropic_stub)


async def test_a_forced_tool_call_turns_thinking_off(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    await collect(make(thinking_budget=1024), USER, TOOLS, "required")
    assert "thinking" not in sent(anthropic_stub)  # the API refuses both at once


async def test_usage_counts_cached_input(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    anthropic_stub.script(Reply("One two three.", input_tokens=100, cache_read=50, cache_write=10))
    chunks = await collect(make())
    reports = [c for c in chunks if isinstance(c, UsageReport)]
    assert len(reports) == 1 and chunks[-1] is reports[0]
    usage = reports[0].usage
    assert usage.input_tokens == 160  # Parley's input counts the cached part too
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (50, 10)
    assert usage.output_tokens == 3  # the fake's count: one per delta (message_delta's)


@pytest.mark.parametrize(
    ("stop", "finish"),
    [("end_turn", "stop"), ("max_tokens", "length"), ("tool_use", "tool_calls"),
     ("stop_sequence", "stop_sequence"), ("refusal", "refusal")],
)  # fmt: skip
async def test_finish_reasons_in_openai_words(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM], stop: str, finish: str
) -> None:
    anthropic_stub.script(Reply("Well.", stop_reason=stop))
    stream = make().stream(USER)
    [chunk async for chunk in stream]
    assert stream.finish_reason == finish


# -- conversion edge cases, checked by the fake ---------------------------------------------


@pytest.mark.parametrize(
    "context",
    [
        [SYSTEM],
        [SYSTEM, {"role": "assistant", "content": "Hello! How can I help?"}],
    ],
    ids=["empty", "assistant-first"],
)
async def test_a_conversation_without_a_user_message_first(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM], context: Any
) -> None:
    chunks = await collect(make(), context)
    assert text_of(chunks)  # the fake refused no request
    messages = sent(anthropic_stub)["messages"]
    assert messages[0] == {"role": "user", "content": [{"type": "text", "text": OPENING}]}
    assert messages[-1]["role"] == "user"  # an answer, not a continuation of the last


async def test_a_later_system_message_stays_in_place(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    nudge = "The user has been quiet; ask if they are still there."
    context = [*USER, {"role": "assistant", "content": "Sunny."},
               {"role": "system", "content": nudge}]  # fmt: skip
    await collect(make(), context)
    body = sent(anthropic_stub)
    assert body["system"] == [{"type": "text", "text": SYSTEM["content"],
                               "cache_control": CACHED}]  # fmt: skip
    last = {"role": "user", "content": [{"type": "text", "text": f"[system] {nudge}"}]}
    assert body["messages"][-1] == last


def test_a_tool_call_without_its_result_gets_one() -> None:
    call = {"id": "t9", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    turns = to_messages(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [call]},
         {"role": "user", "content": "hello?"}],
        with_tools=True,
    )  # fmt: skip
    assert turns[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t9", "content": "(no result)"},
        {"type": "text", "text": "hello?"},
    ]


# -- failures --------------------------------------------------------------------------------


async def test_a_wrong_key_is_an_auth_error_with_the_vendors_reason(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    with pytest.raises(ServiceAuthError, match=r"rejected the API key") as caught:
        await collect(make(api_key="sk-ant-wrong"))
    assert "invalid x-api-key" in str(caught.value)  # /health shows str(error)
    assert caught.value.status == 401 and not caught.value.retryable


@pytest.mark.parametrize(
    ("status", "error", "retryable", "words"),
    [
        (529, ServiceHTTPError, True, "overloaded"),
        (500, ServiceHTTPError, True, "HTTP 500"),
        (429, ServiceRateLimitError, True, "rate limiting"),
        (403, ServiceAuthError, False, "denied access"),
        (400, ServiceHTTPError, False, "HTTP 400"),
    ],
)
async def test_http_errors_are_typed(
    anthropic_stub: AnthropicStub,
    make: Callable[..., AnthropicLLM],
    status: int,
    error: type[ServiceError],
    retryable: bool,
    words: str,
) -> None:
    anthropic_stub.script(Fault.http(status))
    with pytest.raises(error, match=words) as caught:
        await collect(make())
    assert caught.value.status == status and caught.value.retryable is retryable
    assert str(caught.value).startswith("The LLM service")
    assert len(anthropic_stub.requests) == 1  # no retries: text may have been spoken


async def test_an_error_event_mid_stream(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    anthropic_stub.script(Fault.midstream("overloaded_error", after=2))
    texts: list[str] = []
    with pytest.raises(ServiceHTTPError, match=r"error in its answer \(overloaded_error\)") as e:
        async for chunk in make().stream(USER):
            if isinstance(chunk, TextDelta):
                texts.append(chunk.text)
    assert len(texts) == 2  # what came before the error was streamed
    assert e.value.retryable and e.value.status == 529


async def test_no_first_token_in_time(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    anthropic_stub.script(Reply("Late.", first_delay=5.0))
    started = time.perf_counter()
    with pytest.raises(ServiceTimeoutError, match=r"no first token within 0\.3 s"):
        await collect(make(first_token_timeout=0.3))
    assert time.perf_counter() - started < 4.0  # gave up well before the event came
    assert await anthropic_stub.wait_for(lambda: anthropic_stub.requests[-1].disconnected)


async def test_a_stalled_stream_times_out(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    # Events 0.5 s apart: the first text (the 4th event) within the first-token
    # timeout, the next one past the 0.3 s allowed between chunks.
    anthropic_stub.script(Reply("Slow words here.", chunk_delay=0.5))
    texts: list[str] = []
    with pytest.raises(ServiceTimeoutError, match=r"stalled for more than 0\.3 s"):
        async for chunk in make(first_token_timeout=5.0, chunk_timeout=0.3).stream(USER):
            texts.append(getattr(chunk, "text", ""))
    assert texts == ["Slow "]


async def test_unreachable(make: Callable[..., AnthropicLLM]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(ServiceUnreachableError, match="could not be reached") as caught:
            await collect(make(base_url=f"http://127.0.0.1:{port}"))
    assert caught.value.retryable


async def test_aclose_mid_stream_closes_the_request(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    anthropic_stub.script(Reply("word " * 200, chunk_delay=0.02))
    stream = make().stream(USER)
    assert isinstance(await anext(stream), TextDelta)
    assert isinstance(await anext(stream), TextDelta)
    started = time.perf_counter()
    await stream.aclose()
    assert time.perf_counter() - started < 2.0  # at once, not after 200 words (4 s)
    record = anthropic_stub.requests[-1]
    assert await anthropic_stub.wait_for(lambda: record.disconnected)
    assert not record.completed and stream.duration is not None


async def test_a_cancelled_consumer_closes_the_request(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    """A barge-in cancels the turn's task while it waits for the next event."""
    anthropic_stub.script(Reply("word " * 200, chunk_delay=0.05))
    stream = make().stream(USER)
    first = asyncio.Event()

    async def consume() -> None:
        async with aclosing(stream) as chunks:
            async for _ in chunks:
                first.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(3):
        await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    record = anthropic_stub.requests[-1]
    assert await anthropic_stub.wait_for(lambda: record.disconnected)


async def test_the_breaker_opens_after_repeated_failures(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    breaker = CircuitBreaker("llm", threshold=2, cooldown=60)
    llm = make(breaker=breaker)
    anthropic_stub.script(Fault.http(529), Fault.http(529))
    for _ in range(2):
        with pytest.raises(ServiceHTTPError):
            await collect(llm)
    assert breaker.state == "open" and "overloaded" in breaker.last_error
    with pytest.raises(ServiceUnavailableError):
        await collect(llm)
    assert len(anthropic_stub.requests) == 2  # refused at once, never sent


async def test_a_success_resets_the_breakers_count(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    breaker = CircuitBreaker("llm", threshold=2, cooldown=60)
    llm = make(breaker=breaker)
    anthropic_stub.script(Fault.http(500), "Fine.", Fault.http(500))
    with pytest.raises(ServiceHTTPError):
        await collect(llm)
    assert text_of(await collect(llm)) == "Fine."
    with pytest.raises(ServiceHTTPError):
        await collect(llm)
    assert breaker.state == "closed"


# -- complete() ------------------------------------------------------------------------------


async def test_complete(anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]) -> None:
    anthropic_stub.script("A short summary.")
    assert await make().complete(USER, max_tokens=64) == "A short summary."
    body = sent(anthropic_stub)
    assert body["max_tokens"] == 64 and not body.get("stream")
    assert body["system"][0]["text"] == SYSTEM["content"]


async def test_complete_maps_errors(
    anthropic_stub: AnthropicStub, make: Callable[..., AnthropicLLM]
) -> None:
    anthropic_stub.script(Fault.http(529))
    with pytest.raises(ServiceHTTPError, match="overloaded") as caught:
        await make().complete(USER)
    assert caught.value.retryable
