"""The OpenAI-compatible LLM, STT and TTS services, through the real ``openai`` client,
against the stub server on 127.0.0.1 (see testkit/openai_stub.py)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, TypeVar

import numpy as np
import openai
import pytest

from pipeline.services.errors import (
    ServiceAuthError,
    ServiceBadResponseError,
    ServiceError,
    ServiceHTTPError,
    ServiceRateLimitError,
    ServiceTimeoutError,
    ServiceUnreachableError,
)
from pipeline.services.llm import TextDelta, ToolCallRequest, UsageReport
from pipeline.services.openai_llm import OpenAILLM
from pipeline.services.openai_stt import OpenAISTT
from pipeline.services.openai_tts import OpenAITTS, PCMDecoder
from pipeline.services.retry import RetryPolicy
from testkit.openai_stub import (
    ChatReply,
    Fault,
    OpenAIStub,
    ToolCall,
    openai_stub_fixture,  # noqa: F401  (provides the ``openai_stub`` fixture)
    wav_info,
)

S = TypeVar("S")
CHAT = "/v1/chat/completions"
STT = "/v1/audio/transcriptions"
TTS = "/v1/audio/speech"
USER = [{"role": "user", "content": "What is the weather like in Paris today?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture
async def make(openai_stub: OpenAIStub) -> AsyncIterator[Callable[..., Any]]:
    """Builds services pointed at the stub (short timeouts) and closes them afterwards."""
    made: list[Any] = []

    def factory(cls: type[S], *args: Any, **kwargs: Any) -> S:
        kwargs.setdefault("base_url", openai_stub.base_url)
        kwargs.setdefault("api_key", openai_stub.api_key)
        if cls is OpenAILLM:
            kwargs.setdefault("first_token_timeout", 2.0)
            kwargs.setdefault("chunk_timeout", 2.0)
        else:
            kwargs.setdefault("timeout", 2.0)
            kwargs.setdefault("retry", RetryPolicy(retries=2, base_delay=0.01))
        service = cls(*args, **kwargs)
        made.append(service)
        return service

    yield factory
    for service in made:
        await service.aclose()


async def collect(llm: OpenAILLM, tools: Any = None, tool_choice: Any = None) -> list[Any]:
    return [chunk async for chunk in llm.stream(USER, tools, tool_choice)]


def text_of(chunks: list[Any]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


# -- LLM ---------------------------------------------------------------------------------------


async def test_llm_streams_text_deltas(openai_stub: OpenAIStub, make: Callable[..., Any]) -> None:
    openai_stub.script_chat("Sunny and mild, about twenty degrees.")
    llm = make(OpenAILLM, "stub-llm")
    chunks = await collect(llm)
    deltas = [c for c in chunks if isinstance(c, TextDelta)]
    assert len(deltas) == 6
    assert text_of(chunks) == "Sunny and mild, about twenty degrees."
    sent = openai_stub.requests(CHAT)[-1]
    assert sent.body["model"] == "stub-llm"
    assert sent.body["messages"] == USER
    assert sent.body["stream"] is True
    assert sent.body["stream_options"] == {"include_usage": True}
    assert sent.headers["authorization"] == f"Bearer {openai_stub.api_key}"
    assert "tools" not in sent.body and "tool_choice" not in sent.body


async def test_llm_joins_parallel_tool_calls(
    openai_stub: OpenAIStub, make: Callable[..., Any]
) -> None:
    paris = {"city": "Paris", "unit": "celsius", "note": "a long value split in fragments"}
    openai_stub.script_chat(
        ChatReply(
            "Let me check.",
            (ToolCall("get_weather", paris, id="call_a"), ToolCall("get_time", {"tz": "CET"})),
        )
    )
    chunks = await collect(make(OpenAILLM, "m"), TOOLS)
    calls = [c for c in chunks if isinstance(c, ToolCallRequest)]
    assert calls == [
        ToolCallRequest("call_a", "get_weather", paris),
        ToolCallRequest("call_1", "get_time", {"tz": "CET"}),
    ]
    assert text_of(chunks) == "Let me check."
    # Text first, then the calls once the stream is done, then usage.
    assert isinstance(chunks[-1], UsageReport)
    assert chunks.index(calls[0]) > max(i for i, c in enumerate(chunks) if isinstance(c, TextDelta))


async def test_llm_forwards_tools_and_tool_choice(
    openai_stub: OpenAIStub, make: Callable[..., Any]
) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    await collect(make(OpenAILLM, "m"), TOOLS, choice)
    sent = openai_stub.requests(CHAT)[-1].body
    assert sent["tools"] == TOOLS
    assert sent["tool_choice"] == choice


async def test_llm_without_tool_support_sends_no_tools(
    openai_stub: OpenAIStub, make: Callable[..., Any]
) -> None:
    await collect(make(OpenAILLM, "m", supports_tools=False), TOOLS, "required")
    sent = openai_stub.requests(CHAT)[-1].body
    assert "tools" not in sent and "tool_choice" not in sent


async def test_llm_reports_usage(openai_stub: OpenAIStub, make: Callable[..., Any]) -> None:
    openai_stub.script_chat("One two three.")
    chunks = await collect(make(OpenAILLM, "m"))
    usage = [c.usage for c in chunks if isinstance(c, UsageReport)]
    assert len(usage) == 1
    assert usage[0].output_tokens == 3
    assert usage[0].input_tokens == len(USER[0]["content"].split())


async def test_llm_measures_time_to_first_token(
    openai_stub: OpenAIStub, make: Callable[..., Any]
) -> None:
    openai_stub.config.first_token_delay = 0.15
    openai_stub.config.token_delay = 0.02
    stream = make(OpenAILLM, "m").stream(USER)
    assert stream.ttfb is None and stream.duration is None
    [chunk async for chunk in stream]
    assert stream.ttfb is not None and stream.duration is not None
    # The role-only first chunk comes at once; only content counts as the first token.
    assert 0.15 <= stream.ttfb < 1.0
    assert stream.duration >= stream.ttfb + 0.02


async def test_llm_aclose_mid_stream_closes_the_request(
    openai_stub: OpenAIStub, make: Callable[..., Any]
) -> None:
    openai_stub.script_chat("word " * 100)
    openai_stub.config.token_delay = 0.02
    stream = make(OpenAILLM, "m").stream(USER)
    assert isinstance(await anext(stream), TextDelta)
    assert isinstance(await anext(stream), TextDelta)
    started = time.perf_counter()
    await stream.aclose()
    # At once, not after the rest of the answer (100 tokens, 2 s at the stub's pace).
    assert time.perf_counter() - started < 1.5
    record = openai_stub.requests(CHAT)[-1]
    assert await openai_stub.wait_for(lambda: record.disconnected)
    assert not record.completed


async def test_llm_cancelled_consumer_closes_the_request(
    openai_stub: OpenAIStub, make: Callable[..., Any]
) -> None:
    """A barge-in cancels the turn's task while it waits for the next chunk."""
    openai_stub.script_chat("word " * 100)
    openai_stub.config.token_delay = 0.05
    llm = make(OpenAILLM, "m")
    first = asyncio.Event()

    stream = llm.stream(USER)

    async def consume() -> None:
        async with aclosing(stream) as chunks:
            async for _ in chunks:
                first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    record = openai_stub.requests(CHAT)[-1]
    assert await openai_stub.wait_for(lambda: record.disconnected)
    assert stream.duration is not None and stream.ttfb is not None


@pytest.mark.parametrize(
    ("fault", "error", "words"),
    [
        (Fault.http(500), ServiceHTTPError, "HTTP 500"),
        (Fault.http(503), ServiceHTTPError, "HTTP 503"),
        (Fault.http(401), ServiceAuthError, "API key"),
        (Fault.http(429), ServiceRateLimitError, "rate limiting"),
        (Fault.http(400), ServiceHTTPError, "HTTP 400"),
        (Fault.hang(), ServiceTimeoutError, r"no answer within 0\.3 s"),
        (Fault.stall(5, after=2), ServiceTimeoutError, r"stalled for more than 0\.3 s"),
        (Fault.cut(after=2), ServiceBadResponseError, r"ended mid-way \(connection lost\)"),
        (Fault.truncate(after=2), ServiceBadResponseError, r"ended mid-way \(no finish reason\)"),
        (Fault.malformed(after=2), ServiceBadResponseError, "not valid JSON"),
    ],
)
async def test_llm_faults_raise_typed_errors(
    openai_stub: OpenAIStub,
    make: Callable[..., Any],
    fault: Fault,
    error: type[ServiceError],
    words: str,
) -> None:
    openai_stub.script_chat(fault)
    llm = make(OpenAILLM, "m", first_token_timeout=0.3, chunk_timeout=0.3)
    texts: list[str] = []
    with pytest.raises(error, match=words) as caught:
        async for chunk in llm.stream(USER):
            if isinstance(chunk, TextDelta):
                texts.append(chunk.text)
    assert caught.value.service == "llm"
    assert str(caught.value).startswith("The LLM service")
    if fault.kind in ("cut", "truncate", "malformed", "stall"):
        assert len(texts) == 2  # what came before the fault was streamed
    expected_retryable = fault.kind in ("hang", "stall") or fault.status in (500, 503, 429)
    if fault.kind not in ("cut", "truncate", "malformed"):
        assert caught.value.retryable is expected_retryable
    assert len(openai_stub.requests(CHAT)) == 1  # the LLM never retries


async def test_llm_wrong_key_is_an_auth_error(
    openai_stub: OpenAIStub, make: Callable[..., Any]
) -> None:
    llm = make(OpenAILLM, "m", api_key="sk-wrong")
    with pytest.raises(ServiceAuthError, match=r"rejected the API key \(HTTP 401") as caught:
        await collect(llm)
    assert caught.value.status == 401 and not caught.value.retryable
    assert openai_stub.requests(CHAT)[-1].headers["authorization"] == "Bearer sk-wrong"


async def test_llm_first_token_timeout(openai_stub: OpenAIStub, make: Callable[..., Any]) -> None:
    openai_stub.config.first_token_delay = 2.0
    llm = make(OpenAILLM, "m", first_token_timeout=0.2)
    started = time.perf_counter()
    with pytest.raises(ServiceTimeoutError, match=r"no first token within 0\.2 s"):
        await collect(llm)
    assert time.perf_counter() - started < 1.9  # gave up before the token came (at 2 s)


async def test_llm_malformed_tool_arguments(
    openai_stub: OpenAIStub, make: Callable[..., Any]
) -> None:
    openai_stub.script_chat(ChatReply(tool_calls=(ToolCall("get_weather", '{"city": "Par'),)))
    with pytest.raises(ServiceBadResponseError, match="'get_weather' are not valid JSON"):
        await collect(make(OpenAILLM, "m"), TOOLS)


async def test_llm_unreachable(make: Callable[..., Any]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        llm = make(OpenAILLM, "m", base_url=f"http://127.0.0.1:{port}/v1")
        with pytest.raises(ServiceUnreachableError, match="could not be reached") as caught:
            await collect(llm)
    assert caught.value.retryable


async def test_llm_complete(openai_stub: OpenAIStub, make: Callable[..., Any]) -> None:
    openai_stub.script_chat("A short summary.")
    assert await make(OpenAILLM, "m").complete(USER, max_tokens=64) == "A short summary."
    sent = openai_stub.requests(CHAT)[-1].body
    assert sent["max_tokens"] == 64 and not sent.get("stream")


async def test_llm_complete_maps_errors(openai_stub: OpenAIStub, make: Callable[..., Any]) -> None:
    openai_stub.script_chat(Fault.http(503))
    with pytest.raises(ServiceHTTPError, match="HTTP 503"):
        await make(OpenAILLM, "m").complete(USER)


# -- STT ---------------------------------------------------------------------------------------


def utterance(seconds: float = 1.0, rate: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (3000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


async def test_stt_transcribes_a_wav(openai_stub: OpenAIStub, make: Callable[..., Any]) -> None:
    openai_stub.script_stt("  What's the weather in Paris?  ")
    stt = make(OpenAISTT, "stub-stt", language="en")
    pcm = utterance()
    transcript = await stt.transcribe(pcm, 16000)
    assert transcript.text == "What's the weather in Paris?"
    assert transcript.language == "en"
    sent = openai_stub.requests(STT)[-1].body
    assert sent["model"] == "stub-stt" and sent["language"] == "en"
    assert sent["file.filename"] == "audio.wav"
    assert wav_info(sent["file"]) == (1, 2, 16000, pcm.size)
    assert sent["file"][44:] == pcm.tobytes()


async def test_stt_retries_on_503_then_succeeds(
    openai_stub: OpenAIStub, make: Callable[..., Any]
) -> None:
    openai_stub.fail_times("stt", 2, Fault.http(503))
    transcript = await make(OpenAISTT, "m").transcribe(utterance(0.2))
    assert transcript.text == "hello world"
    assert len(openai_stub.requests(STT)) == 3


async def test_stt_gives_up_after_its_retries(
    openai_stub: OpenAIStub, make: Callable[..., Any]
) -> None:
    openai_stub.fail_times("stt", 5, Fault.http(500))
    with pytest.raises(ServiceHTTPError, match="speech-to-text service failed"):
        await make(OpenAISTT, "m").transcribe(utterance(0.2))
    assert len(openai_stub.requests(STT)) == 3


@pytest.mark.parametrize(("status", "error"), [(401, ServiceAuthError), (400, ServiceHTTPError)])
async def test_stt_does_not_retry_client_errors(
    openai_stub: OpenAIStub, make: Callable[..., Any], status: int, error: type[ServiceError]
) -> None:
    openai_stub.fail_times("stt", 1, Fault.http(status))
    with pytest.raises(error, match=f"HTTP {status}"):
        await make(OpenAISTT, "m").transcribe(utterance(0.2))
    assert len(openai_stub.requests(STT)) == 1


async def test_stt_timeout_is_retried(openai_stub: OpenAIStub, make: Callable[..., Any]) -> None:
    openai_stub.script_stt(Fault.hang())
    stt = make(OpenAISTT, "m", timeout=0.3, retry=RetryPolicy(retries=1, base_delay=0.01))
    assert (await stt.transcribe(utterance(0.2))).text == "hello world"
    assert len(openai_stub.requests(STT)) == 2


# -- TTS ---------------------------------------------------------------------------------------


async def test_tts_streams_int16_pcm(openai_stub: OpenAIStub, make: Callable[..., Any]) -> None:
    text = "The weather in Paris is sunny and mild today."
    tts = make(OpenAITTS, "stub-tts", "alloy")
    chunks = [c async for c in tts.synthesize(text)]
    assert tts.sample_rate == 24000
    assert len(chunks) > 1
    assert all(c.dtype == np.int16 and c.ndim == 1 for c in chunks)
    audio = np.concatenate(chunks)
    assert audio.size == openai_stub.tts_samples(text)
    assert np.abs(audio).max() > 5000  # the voice, not silence
    # Sample for sample what was sent: no sample split across chunks, no byte shift.
    assert np.array_equal(audio, openai_stub.tts_audio(text))
    sent = openai_stub.requests(TTS)[-1].body
    assert sent == {"model": "stub-tts", "voice": "alloy", "input": text, "response_format": "pcm"}


def test_pcm_decoder_carries_odd_bytes() -> None:
    samples = np.arange(-50, 50, dtype=np.int16)
    data = samples.tobytes()
    decoder = PCMDecoder()
    out = [decoder.feed(data[i : i + 3]) for i in range(0, len(data), 3)]
    assert np.array_equal(np.concatenate([o for o in out if o is not None]), samples)


async def test_tts_retries_before_audio(openai_stub: OpenAIStub, make: Callable[..., Any]) -> None:
    openai_stub.fail_times("tts", 2, Fault.http(503))
    chunks = [c async for c in make(OpenAITTS, "m", "v").synthesize("Hello.")]
    assert sum(c.size for c in chunks) == openai_stub.tts_samples("Hello.")
    assert len(openai_stub.requests(TTS)) == 3


async def test_tts_does_not_retry_after_audio_started(
    openai_stub: OpenAIStub, make: Callable[..., Any]
) -> None:
    openai_stub.script_tts(Fault.cut(after=1))
    tts = make(OpenAITTS, "m", "v")
    got: list[np.ndarray] = []
    with pytest.raises(ServiceBadResponseError, match=r"text-to-speech .* ended mid-way"):
        async for chunk in tts.synthesize("A sentence long enough for several chunks."):
            got.append(chunk)
    assert got  # audio had started
    assert len(openai_stub.requests(TTS)) == 1


async def test_tts_does_not_retry_a_bad_key(
    openai_stub: OpenAIStub, make: Callable[..., Any]
) -> None:
    with pytest.raises(ServiceAuthError, match="text-to-speech service rejected the API key") as e:
        await anext(make(OpenAITTS, "m", "v", api_key="sk-wrong").synthesize("Hi."))
    assert len(openai_stub.requests(TTS)) == 1
    assert e.value.__cause__ is not e.value  # the SDK's error, not itself (a cause cycle)


async def test_tts_aclose_closes_the_request(
    openai_stub: OpenAIStub, make: Callable[..., Any]
) -> None:
    openai_stub.config.tts_chunk_delay = 0.02
    stream = make(OpenAITTS, "m", "v").synthesize("word " * 200)
    await anext(stream)
    await stream.aclose()
    record = openai_stub.requests(TTS)[-1]
    assert await openai_stub.wait_for(lambda: record.disconnected)


async def test_stub_lists_models(openai_stub: OpenAIStub) -> None:
    async with openai.AsyncOpenAI(base_url=openai_stub.base_url, api_key=openai_stub.api_key) as c:
        models = [m.id async for m in await c.models.list()]
    assert models == ["stub-llm", "stub-stt", "stub-tts"]
