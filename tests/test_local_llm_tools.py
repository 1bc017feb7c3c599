"""Tool calls with the embedded LLM (pipeline/services/local_llm.py).

On the real weights (Qwen2.5-Coder-1.5B via llama.cpp): the cache warmed for the system
prompt and tools, a question that needs the clock becomes a call of the clock tool, one
that does not is answered in words. Three requests in all (seconds each on two cores), so
only what no scripted test can show is checked there. On a scripted llama.cpp: the
requests LocalLLM makes (tools, history, sampling, the window, the warm-up per slot). The
parsing itself is in tests/test_content_tool_calls.py.

The model is located through :class:`EmbeddedModels` like the server's (its chunks joined
into ``PARLEY_MODEL_DIR``, else the user's cache, on first use); read at import, since the
test environment clears ``PARLEY_*`` variables.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest

from pipeline.services.embedded import EmbeddedConfig, EmbeddedModels
from pipeline.services.embedded_specs import LLMS
from pipeline.services.llm import LLMChunk, TextDelta, ToolCallRequest, UsageReport
from pipeline.services.local_llm import LocalLLM
from pipeline.services.local_llm_prompt import (
    estimate_tokens,
    fenced_calls,
    to_tool_chat_messages,
    tools_tokens,
)
from pipeline.tools.builtin import default_registry

MODEL_DIR = os.environ.get("PARLEY_MODEL_DIR")
SYSTEM = (
    "You are Parley, a friendly voice assistant. Your answers are spoken aloud, so keep "
    "them short: one or two sentences, plain words, no lists, no markdown, no emoji."
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name."}},
            "required": ["city"],
        },
    },
}
TOOLS = [*default_registry().openai_tools(), WEATHER]  # get_current_time and the weather


@pytest.fixture(scope="module")
def qwen() -> Iterator[LocalLLM]:
    models = EmbeddedModels(
        EmbeddedConfig(warm_up=False),  # warm() below does better than the default warm-up
        llm="qwen2.5-1.5b",
        model_dir=Path(MODEL_DIR) if MODEL_DIR else None,
    )
    if models.llm_spec.name != "qwen2.5-1.5b":  # its parts are not installed
        pytest.skip(f"Qwen is not available: {models.fallback_reasons}")
    llm = LocalLLM(models, max_tokens=60)
    asyncio.run(llm.warm(SYSTEM, TOOLS))  # every slot reads the prefix once
    yield llm
    models.shutdown()


async def ask(llm: LocalLLM, question: str) -> tuple[list[LLMChunk], list[float]]:
    """The chunks of one answer, and when (seconds from the call) each text arrived."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    loop = asyncio.get_running_loop()
    started = loop.time()
    chunks: list[LLMChunk] = []
    text_times: list[float] = []
    async with aclosing(llm.stream(messages, TOOLS, "auto")) as stream:
        async for chunk in stream:
            chunks.append(chunk)
            if isinstance(chunk, TextDelta) and chunk.text.strip():
                text_times.append(loop.time() - started)
    return chunks, text_times


def text_of(chunks: list[Any]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


@pytest.mark.e2e
async def test_a_question_for_the_clock_becomes_a_call_of_the_clock_tool(qwen: LocalLLM) -> None:
    assert qwen.supports_tools and "Qwen" in qwen.model
    chunks, _ = await ask(qwen, "What time is it right now?")
    calls = [c for c in chunks if isinstance(c, ToolCallRequest)]
    assert [c.name for c in calls] == ["get_current_time"], chunks
    assert calls[0].tool_call_id.startswith("call_")
    assert not text_of(chunks).strip(), "the call's JSON must never be spoken"
    [usage] = [c.usage for c in chunks if isinstance(c, UsageReport)]
    # warm() left the system prompt and tools in the slot: only the question was read.
    assert usage.cache_read_tokens > 200 and usage.input_tokens - usage.cache_read_tokens < 40


@pytest.mark.e2e
async def test_a_plain_question_is_answered_in_words_as_they_come(qwen: LocalLLM) -> None:
    chunks, text_times = await ask(qwen, "How many legs does a spider have?")
    assert not [c for c in chunks if isinstance(c, ToolCallRequest)], chunks
    text = text_of(chunks).lower()
    assert "8" in text or "eight" in text, text
    assert len(text_times) > 1  # streamed word by word, not held to the end


# -- the requests LocalLLM makes, on a scripted llama.cpp (no model) -----------------------


class ScriptedServer:
    """Stands in for xllamacpp's Server: records requests, streams scripted chunks."""

    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.chunks = chunks
        self.requests: list[dict[str, Any]] = []

    def handle_chat_completions(self, request: dict[str, Any], callback: Any) -> None:
        self.requests.append(request)
        for chunk in self.chunks:
            if callback(chunk):
                return


class ScriptedModels:
    """What LocalLLM uses of EmbeddedModels (SmolLM2's spec unless given another)."""

    def __init__(self, server: ScriptedServer, spec: Any = LLMS["smollm2-135m"]) -> None:
        from pipeline.services.workers import WorkerPool

        self.config = EmbeddedConfig()
        self.llm_spec = spec
        self.server = server
        self.llm = self
        self.pool = WorkerPool("scripted LLM", 2, 8)

    async def get(self) -> ScriptedServer:
        return self.server


QWEN_SPEC = LLMS["qwen2.5-1.5b"]


def deltas(*texts: str, finish: str = "stop") -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = [{"choices": [{"delta": {"content": t}}]} for t in texts]
    chunks.append({"choices": [{"delta": {}, "finish_reason": finish}]})
    chunks.append({"choices": [], "usage": {"prompt_tokens": 300, "completion_tokens": 20}})
    return chunks


HISTORY = [
    {"role": "developer", "content": SYSTEM},
    {"role": "user", "content": "What time is it?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_current_time", "arguments": '{"timezone": "UTC"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"time": "14:05"}'},
    {"role": "user", "content": "And the weather in Paris?"},
]


async def collect(llm: LocalLLM, tools: list[dict[str, Any]] | None = TOOLS) -> Any:
    stream = llm.stream(HISTORY, tools, "auto")
    async with aclosing(stream) as chunks:
        return [c async for c in chunks], stream


async def test_a_tool_model_gets_the_tools_and_the_history_its_template_takes() -> None:
    fence = ["```json\n", '{"name": "get_weather", ', '"arguments": {"city": "Paris"}}\n```']
    server = ScriptedServer(deltas(*fence))
    llm = LocalLLM(ScriptedModels(server, QWEN_SPEC), max_tokens=60)  # type: ignore[arg-type]
    assert llm.supports_tools and llm.model == QWEN_SPEC.label
    chunks, stream = await collect(llm)
    [request] = server.requests
    assert request["tools"] == TOOLS and request["tool_choice"] == "auto"
    assert request["temperature"] == 0.0 and request["repeat_penalty"] == 1.1
    assert request["cache_prompt"] is True
    assert [m["role"] for m in request["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
    ]
    # A call not answered yet keeps the template's form (llama.cpp renders its tags).
    assert request["messages"][2]["tool_calls"] == HISTORY[2]["tool_calls"]

    assert request["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"time": "14:05"}',
    }
    calls = [c for c in chunks if isinstance(c, ToolCallRequest)]
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert not text_of(chunks) and isinstance(chunks[-1], UsageReport)
    assert stream.finish_reason == "tool_calls" and stream.ttfb is not None


def test_answered_calls_are_written_back_as_the_model_writes_them() -> None:
    answered = [*HISTORY[:4], {"role": "assistant", "content": "It is 14:05."}, HISTORY[4]]
    messages = to_tool_chat_messages(answered)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert "tool_calls" not in messages[2]
    assert messages[2]["content"] == fenced_calls(HISTORY[2]["tool_calls"])
    assert messages[2]["content"] == (
        '```json\n{"name": "get_current_time", "arguments": {"timezone": "UTC"}}\n```'
    )
    # Still waiting for its answer (the last exchange): the template's form.
    assert to_tool_chat_messages(HISTORY[:4])[2]["tool_calls"] == HISTORY[2]["tool_calls"]


async def test_tool_calls_the_server_did_parse_are_joined() -> None:
    call = {"index": 0, "id": "call_x", "function": {"name": "get_current_time"}}
    rest = {"index": 0, "function": {"arguments": '{"timezone": "UTC"}'}}
    chunks = [{"choices": [{"delta": {"tool_calls": [d]}}]} for d in (call, rest)]
    server = ScriptedServer(chunks + deltas(finish="tool_calls"))
    llm = LocalLLM(ScriptedModels(server, QWEN_SPEC), max_tokens=60)  # type: ignore[arg-type]
    received, _ = await collect(llm)
    [request] = [c for c in received if isinstance(c, ToolCallRequest)]
    assert request == ToolCallRequest("call_x", "get_current_time", {"timezone": "UTC"})


async def test_a_model_without_tools_gets_none_and_a_flattened_history() -> None:
    server = ScriptedServer(deltas("It is ", "sunny."))
    llm = LocalLLM(ScriptedModels(server), max_tokens=60)  # type: ignore[arg-type]
    assert not llm.supports_tools and "SmolLM2" in llm.model
    chunks, _ = await collect(llm)
    [request] = server.requests
    assert "tools" not in request and request["temperature"] == 0.2
    assert [m["role"] for m in request["messages"]] == ["system", "user", "system", "user"]
    assert text_of(chunks) == "It is sunny."


async def test_the_window_counts_the_tools() -> None:
    long_history = [HISTORY[0]]
    for n in range(60):
        long_history += [
            {"role": "user", "content": f"Question {n}: " + "word " * 30},
            {"role": "assistant", "content": f"Answer {n}: " + "text " * 30},
        ]
    long_history.append({"role": "user", "content": "And now?"})
    kept = {}
    for tools in (None, TOOLS * 3):
        server = ScriptedServer(deltas("Fine."))
        llm = LocalLLM(ScriptedModels(server, QWEN_SPEC), max_tokens=60)  # type: ignore[arg-type]
        async with aclosing(llm.stream(long_history, tools)) as chunks:
            _ = [c async for c in chunks]
        kept[bool(tools)] = server.requests[0]["messages"]
    assert len(kept[True]) < len(kept[False])
    assert kept[True][-1]["content"] == "And now?"
    budget = 2048 - 60 - 32 - tools_tokens(TOOLS * 3)
    assert sum(estimate_tokens(m) for m in kept[True]) <= budget


async def test_warm_reads_the_prefix_into_every_slot() -> None:
    server = ScriptedServer(deltas("Hi"))
    llm = LocalLLM(ScriptedModels(server, QWEN_SPEC), max_tokens=60)  # type: ignore[arg-type]
    await llm.warm(SYSTEM, TOOLS)
    assert sorted(r["id_slot"] for r in server.requests) == [0, 1]
    for request in server.requests:
        assert request["max_tokens"] == 1 and request["tools"] == TOOLS
        assert request["messages"][0] == {"role": "system", "content": SYSTEM}
