"""GoogleLLM against the Gemini fake, over a real socket, through Google's own SDK: what
the SDK sends and accepts is what proves the fake faithful, and the service right."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

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
from pipeline.services.google_llm import SKIP_SIGNATURE, GoogleLLM
from pipeline.services.llm import LLMChunk, ReasoningDelta, TextDelta, ToolCallRequest, UsageReport
from testkit.gemini_stub import FunctionCall, GeminiFault, GeminiReply, GeminiStub, proto_field

MODEL = "gemini-2.5-flash"
USER: list[dict[str, Any]] = [{"role": "user", "content": "What's the weather in Paris?"}]
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit_name": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time."}}


@pytest.fixture(scope="module")
def server() -> Iterator[GeminiStub]:
    with GeminiStub() as stub:
        yield stub


@pytest.fixture
def stub(server: GeminiStub) -> Iterator[GeminiStub]:
    server.reset()
    yield server
    server.reset()


def make_llm(stub: GeminiStub, **options: Any) -> GoogleLLM:
    options.setdefault("api_key", stub.api_key)
    return GoogleLLM(options.pop("model", MODEL), base_url=stub.url, **options)


@pytest.fixture
async def llm(stub: GeminiStub) -> AsyncIterator[GoogleLLM]:
    service = make_llm(stub)
    yield service
    await service.aclose()


async def collect(llm: GoogleLLM, messages: list[dict[str, Any]], **kwargs: Any) -> list[LLMChunk]:
    return [chunk async for chunk in llm.stream(messages, **kwargs)]


def texts(chunks: list[LLMChunk]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


def calls(chunks: list[LLMChunk]) -> list[ToolCallRequest]:
    return [c for c in chunks if isinstance(c, ToolCallRequest)]


# -- streaming -------------------------------------------------------------------------------


async def test_text_streams_in_chunks_with_timing(stub: GeminiStub, llm: GoogleLLM) -> None:
    stub.script("Sunny and warm in Paris today.")
    stream = llm.stream(USER)
    chunks = [chunk async for chunk in stream]
    deltas = [c for c in chunks if isinstance(c, TextDelta)]
    assert len(deltas) == 6 and texts(chunks) == "Sunny and warm in Paris today."
    assert stream.finish_reason == "stop"
    assert stream.ttfb is not None and stream.duration is not None
    assert 0 < stream.ttfb <= stream.duration < 5
    assert isinstance(chunks[-1], UsageReport)  # usage comes last
    request = stub.requests()[-1]
    assert request.method == "streamGenerateContent" and request.query == {"alt": "sse"}
    assert request.model == MODEL and request.headers["x-goog-api-key"] == stub.api_key
    assert request.body["contents"] == [{"role": "user", "parts": [{"text": USER[0]["content"]}]}]
    assert request.completed and not request.disconnected


async def test_ttfb_counts_the_wait_for_the_first_chunk(stub: GeminiStub, llm: GoogleLLM) -> None:
    stub.config.first_chunk_delay = 0.3
    stream = llm.stream(USER)
    assert texts([c async for c in stream]) == stub.config.default_text
    assert stream.ttfb is not None and 0.3 <= stream.ttfb < 5


async def test_one_function_call(stub: GeminiStub, llm: GoogleLLM) -> None:
    stub.script(GeminiReply(calls=(FunctionCall("get_weather", {"city": "Paris"}),)))
    stream = llm.stream(USER, tools=[WEATHER])
    chunks = [c async for c in stream]
    [call] = calls(chunks)
    assert call.name == "get_weather" and call.arguments == {"city": "Paris"}
    assert call.tool_call_id.startswith("call_")
    assert stream.finish_reason == "tool_calls"  # though Gemini said STOP
    assert texts(chunks) == "" and stream.ttfb is not None


async def test_two_function_calls_keep_their_order_and_ids(
    stub: GeminiStub, llm: GoogleLLM
) -> None:
    reply = GeminiReply(
        text="Let me check.",
        calls=(FunctionCall("get_weather", {"city": "Paris"}), FunctionCall("get_time", id="g-7")),
    )
    stub.script(reply, reply)
    chunks = await collect(llm, USER, tools=[WEATHER, TIME])
    first, second = calls(chunks)
    assert (first.name, second.name) == ("get_weather", "get_time")
    assert second.tool_call_id == "g-7" and second.arguments == {}  # Gemini's own id, kept
    assert texts(chunks) == "Let me check."
    again = calls(await collect(llm, USER, tools=[WEATHER, TIME]))
    assert again[0].tool_call_id != first.tool_call_id  # generated ids never repeat


async def test_a_follow_up_turn_sends_calls_and_results(stub: GeminiStub, llm: GoogleLLM) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a weather bot."},
        *USER,
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": ""}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"sky": "sunny", "deg": 21}'},
        {"role": "tool", "tool_call_id": "c2", "content": "half past nine"},
        {"role": "user", "content": "And tomorrow?"},
    ]  # fmt: skip
    choice = {"type": "function", "function": {"name": "get_weather"}}
    await collect(llm, messages, tools=[WEATHER, TIME], tool_choice=choice)
    body = stub.requests()[-1].body
    system = proto_field(body, "systemInstruction")
    assert [p["text"] for p in system["parts"]] == ["You are a weather bot."]
    contents = body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]  # results + user merged
    model_parts = contents[1]["parts"]
    assert model_parts[0] == {"text": "Checking."}
    made = [proto_field(p, "functionCall") for p in model_parts[1:]]
    assert [(m["name"], m.get("args")) for m in made] == [
        ("get_weather", {"city": "Paris"}), ("get_time", {})
    ]  # fmt: skip
    answers = [proto_field(p, "functionResponse") for p in contents[2]["parts"][:2]]
    assert [(a["name"], a["response"]) for a in answers] == [
        ("get_weather", {"sky": "sunny", "deg": 21}), ("get_time", {"result": "half past nine"})
    ]  # fmt: skip
    assert contents[2]["parts"][2] == {"text": "And tomorrow?"}
    [tool] = body["tools"]
    declarations = proto_field(tool, "functionDeclarations")
    assert [d["name"] for d in declarations] == ["get_weather", "get_time"]
    schema = proto_field(declarations[0], "parametersJsonSchema")
    assert schema == WEATHER["function"]["parameters"]  # passed through, snake_case kept
    calling = proto_field(proto_field(body, "toolConfig"), "functionCallingConfig")
    assert calling["mode"] == "ANY"
    assert proto_field(calling, "allowedFunctionNames") == ["get_weather"]


@pytest.mark.parametrize(
    ("choice", "mode"), [("auto", "AUTO"), ("none", "NONE"), ("required", "ANY")]
)
async def test_tool_choice_modes(stub: GeminiStub, llm: GoogleLLM, choice: str, mode: str) -> None:
    await collect(llm, USER, tools=[WEATHER], tool_choice=choice)
    config = proto_field(stub.requests()[-1].body, "toolConfig")
    assert proto_field(config, "functionCallingConfig") == {"mode": mode}


async def test_no_tools_sent_when_the_model_takes_none(stub: GeminiStub) -> None:
    llm = make_llm(stub, supports_tools=False)
    try:
        await collect(llm, USER, tools=[WEATHER], tool_choice="auto")
    finally:
        await llm.aclose()
    body = stub.requests()[-1].body
    assert "tools" not in body and proto_field(body, "toolConfig") is None


async def test_thought_signatures_go_back_with_their_calls(stub: GeminiStub) -> None:
    llm = make_llm(stub, model="gemini-3-flash-preview")
    signature = base64.b64encode(b"opaque-signature").decode()
    stub.script(
        GeminiReply(calls=(FunctionCall("get_weather", {"city": "Oslo"}, signature=signature),))
    )
    try:
        [call] = calls(await collect(llm, USER, tools=[WEATHER]))
        unknown = {"id": "elsewhere", "type": "function",
                   "function": {"name": "get_time", "arguments": "{}"}}  # fmt: skip
        history: list[dict[str, Any]] = [
            *USER,
            {"role": "assistant", "tool_calls": [
                {"id": call.tool_call_id, "type": "function",
                 "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}]},
            {"role": "tool", "tool_call_id": call.tool_call_id, "content": "cold"},
            {"role": "assistant", "tool_calls": [unknown]},
            {"role": "tool", "tool_call_id": "elsewhere", "content": "noon"},
        ]  # fmt: skip
        await collect(llm, history, tools=[WEATHER, TIME])
    finally:
        await llm.aclose()
    contents = stub.requests()[-1].body["contents"]
    sent = [base64.urlsafe_b64decode(proto_field(c["parts"][0], "thoughtSignature"))
            for c in contents if c["role"] == "model"]  # fmt: skip
    assert sent == [b"opaque-signature", SKIP_SIGNATURE]


async def test_images_go_inline(stub: GeminiStub, llm: GoogleLLM) -> None:
    jpeg = b"\xff\xd8\xff\xe0 not really a jpeg \xff\xd9"
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    content = [{"type": "text", "text": "What is this?"},
               {"type": "image_url", "image_url": {"url": url}}]  # fmt: skip
    await collect(llm, [{"role": "user", "content": content}])
    [turn] = stub.requests()[-1].body["contents"]
    assert turn["parts"][0] == {"text": "What is this?"}
    inline = proto_field(turn["parts"][1], "inlineData")
    assert proto_field(inline, "mimeType") == "image/jpeg"
    assert base64.urlsafe_b64decode(inline["data"]) == jpeg


async def test_thoughts_stream_as_reasoning_never_text(stub: GeminiStub) -> None:
    llm = make_llm(stub, thinking_budget=256)
    stub.script(GeminiReply("It is sunny.", thought="The user wants the weather."))
    try:
        chunks = await collect(llm, USER)
    finally:
        await llm.aclose()
    reasoning = "".join(c.text for c in chunks if isinstance(c, ReasoningDelta))
    assert reasoning == "The user wants the weather." and texts(chunks) == "It is sunny."
    index = [type(c) for c in chunks]
    assert index.index(TextDelta) > max(i for i, t in enumerate(index) if t is ReasoningDelta)
    thinking = proto_field(
        proto_field(stub.requests()[-1].body, "generationConfig"), "thinkingConfig"
    )
    assert proto_field(thinking, "includeThoughts") is True
    assert proto_field(thinking, "thinkingBudget") == 256


async def test_no_thoughts_asked_for_without_a_budget(stub: GeminiStub, llm: GoogleLLM) -> None:
    await collect(llm, USER)
    config = proto_field(stub.requests()[-1].body, "generationConfig") or {}
    assert proto_field(config, "thinkingConfig") is None


async def test_usage_is_reported_once_with_the_last_totals(stub: GeminiStub) -> None:
    llm = make_llm(stub, thinking_budget=64)
    stub.script(GeminiReply("one two three", thought="hmm let me see"))
    try:
        chunks = await collect(llm, USER)
    finally:
        await llm.aclose()
    [report] = [c for c in chunks if isinstance(c, UsageReport)]
    assert report.usage.input_tokens == 5  # the fake counts the prompt's words
    assert report.usage.output_tokens == 3 + 4 and report.reasoning_tokens == 4


@pytest.mark.parametrize(
    ("gemini", "parley"), [("MAX_TOKENS", "length"), ("SAFETY", "safety"), ("STOP", "stop")]
)
async def test_finish_reasons(stub: GeminiStub, llm: GoogleLLM, gemini: str, parley: str) -> None:
    stub.script(GeminiReply("Cut", finish_reason=gemini))
    stream = llm.stream(USER)
    _ = [c async for c in stream]
    assert stream.finish_reason == parley


async def test_max_tokens_is_sent(stub: GeminiStub) -> None:
    llm = make_llm(stub, max_tokens=42)
    try:
        await collect(llm, USER)
    finally:
        await llm.aclose()
    config = proto_field(stub.requests()[-1].body, "generationConfig")
    assert proto_field(config, "maxOutputTokens") == 42


async def test_complete_answers_without_thoughts(stub: GeminiStub, llm: GoogleLLM) -> None:
    stub.script(GeminiReply("A short summary.", thought="Summarise it."))
    assert await llm.complete(USER, max_tokens=50) == "A short summary."
    request = stub.requests()[-1]
    assert request.method == "generateContent"
    assert proto_field(proto_field(request.body, "generationConfig"), "maxOutputTokens") == 50


# -- failures --------------------------------------------------------------------------------


async def test_a_bad_key_is_an_auth_error_with_googles_reason(stub: GeminiStub) -> None:
    llm = make_llm(stub, api_key="wrong-key")
    try:
        with pytest.raises(ServiceAuthError) as caught:
            await collect(llm, USER)
    finally:
        await llm.aclose()
    assert "API key not valid" in str(caught.value) and caught.value.status == 400
    assert not caught.value.retryable and "API_KEY_INVALID" in caught.value.detail


async def test_forbidden_is_an_auth_error(stub: GeminiStub, llm: GoogleLLM) -> None:
    stub.script(GeminiFault.http(403, "Permission denied: consumer has been suspended."))
    with pytest.raises(ServiceAuthError, match="consumer has been suspended"):
        await collect(llm, USER)


@pytest.mark.parametrize("status", [500, 503])
async def test_server_errors_are_retryable_and_not_retried(
    stub: GeminiStub, llm: GoogleLLM, status: int
) -> None:
    stub.script(GeminiFault.http(status))
    with pytest.raises(ServiceHTTPError) as caught:
        await collect(llm, USER)
    assert caught.value.retryable and caught.value.status == status
    assert len(stub.requests()) == 1  # the SDK's own retries are off


async def test_quota_is_a_rate_limit(stub: GeminiStub, llm: GoogleLLM) -> None:
    stub.script(GeminiFault.http(429))
    with pytest.raises(ServiceRateLimitError):
        await collect(llm, USER)


async def test_no_first_token_in_time(stub: GeminiStub) -> None:
    llm = make_llm(stub, first_token_timeout=0.3)
    stub.config.first_chunk_delay = 20
    started = time.monotonic()
    try:
        with pytest.raises(ServiceTimeoutError, match=r"no first token within 0\.3 s"):
            await collect(llm, USER)
    finally:
        await llm.aclose()
    assert time.monotonic() - started < 5
    request = stub.requests()[-1]
    assert await stub.wait_for(lambda: request.disconnected)  # the request was dropped


async def test_a_stalled_stream_times_out(stub: GeminiStub) -> None:
    llm = make_llm(stub, chunk_timeout=0.3)
    stub.script("several words in this answer")
    stub.config.chunk_delay = 20
    try:
        stream = llm.stream(USER)
        assert isinstance(await anext(stream), TextDelta)
        with pytest.raises(ServiceTimeoutError, match="stalled"):
            await anext(stream)
    finally:
        await llm.aclose()


async def test_closing_early_closes_the_request(stub: GeminiStub, llm: GoogleLLM) -> None:
    stub.script("a long answer that keeps on going for many words")
    stub.config.chunk_delay = 0.2
    stream = llm.stream(USER)
    assert isinstance(await anext(stream), TextDelta)
    await stream.aclose()
    assert stream.duration is not None
    request = stub.requests()[-1]
    assert await stub.wait_for(lambda: request.disconnected)
    assert not request.completed


async def test_a_cut_stream_is_a_bad_response(stub: GeminiStub, llm: GoogleLLM) -> None:
    stub.script(GeminiFault.cut(after=2))
    stream = llm.stream(USER)
    with pytest.raises(ServiceBadResponseError, match="mid-way"):
        _ = [c async for c in stream]


async def test_nobody_listening_is_unreachable(stub: GeminiStub) -> None:
    with GeminiStub() as gone:
        url = gone.url
    llm = GoogleLLM(MODEL, api_key="k", base_url=url)
    try:
        with pytest.raises(ServiceUnreachableError) as caught:
            await collect(llm, USER)
    finally:
        await llm.aclose()
    assert caught.value.retryable


async def test_the_breaker_opens_after_repeated_failures(stub: GeminiStub) -> None:
    breaker = CircuitBreaker("llm", threshold=2, cooldown=60)
    llm = make_llm(stub, breaker=breaker)
    stub.script(GeminiFault.http(503), GeminiFault.http(503), "never sent")
    try:
        for _ in range(2):
            with pytest.raises(ServiceHTTPError):
                await collect(llm, USER)
        with pytest.raises(ServiceUnavailableError):
            await collect(llm, USER)
        with pytest.raises(ServiceError):
            await llm.complete(USER)
    finally:
        await llm.aclose()
    assert len(stub.requests()) == 2  # refused calls never reach the API
    assert breaker.status()["state"] == "open" and "HTTP 503" in breaker.last_error


async def test_a_success_resets_the_breaker(stub: GeminiStub) -> None:
    breaker = CircuitBreaker("llm", threshold=2, cooldown=60)
    llm = make_llm(stub, breaker=breaker)
    stub.script(GeminiFault.http(500), "fine", GeminiFault.http(500))
    try:
        with pytest.raises(ServiceHTTPError):
            await collect(llm, USER)
        assert texts(await collect(llm, USER)) == "fine"
        with pytest.raises(ServiceHTTPError):
            await collect(llm, USER)
    finally:
        await llm.aclose()
    assert breaker.status()["state"] == "closed"
