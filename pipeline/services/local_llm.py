"""The LLM on the embedded model (Qwen2.5-Coder-1.5B or SmolLM2-135M, GGUF), run by llama.cpp
in-process.

xllamacpp's ``Server.handle_chat_completions(request, callback)`` runs in a worker of the
LLM pool: llama.cpp applies the model's chat template and calls ``callback`` with each
parsed chunk; returning True cancels the task (generation stops ~20 ms after). No socket,
no SSE, and the LLM waits in the same bounded pool as STT and TTS (overload gives
``PoolSaturated``, not a hidden queue). llama.cpp releases the GIL while it decodes.

What the loaded model can do comes from ``EmbeddedModels.llm_spec``, read at each call (a
load-time fallback changes it). A model that calls tools (Qwen) gets the tools in the
request, so its template renders them into the system prompt, and the history keeps
assistant ``tool_calls`` and ``tool`` results as the template expects. Qwen writes its
calls as JSON in the text rather than in ``<tool_call>`` tags, so llama.cpp finds none:
:class:`~pipeline.services.content_tool_calls.ContentToolCalls` holds such text back
(never spoken) and turns it into tool calls; a plain answer streams through at once.
SmolLM2-135M cannot call tools: no tools are sent and the history is reduced to the
roles it was trained on. Either way the prompt is trimmed to the slot's context, tools
included (both in :mod:`pipeline.services.local_llm_prompt`).

Sampling is near-greedy (Qwen: temperature 0, repeat penalty 1.1; at 0.7 its answers
slip, at 0.2 they grew longer and no better). Answers are capped (``max_tokens``: a
spoken answer). Each llama.cpp slot keeps the prompt it last read (``cache_prompt``), so
a request sharing the system prompt and tools reads only the new turn; :meth:`LocalLLM.warm`
primes every slot with that prefix at start-up. Closing the stream early stops the
generation at the next token; a prompt still being read (prefill) is not interruptible,
so at worst the worker frees after that.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from pipeline.messages import Usage
from pipeline.services.content_tool_calls import ContentToolCalls, DeltaToolCalls
from pipeline.services.embedded import EmbeddedModels
from pipeline.services.embedded_specs import LLMSpec
from pipeline.services.llm import LLMChunk, LLMStream, TextDelta, ToolCallRequest, UsageReport
from pipeline.services.local_llm_prompt import (
    RESERVED_TOKENS,
    ContextWindow,
    to_chat_messages,
    to_tool_chat_messages,
    tools_tokens,
)

if TYPE_CHECKING:
    from xllamacpp import Server

_TOOL_CHOICES = ("auto", "none", "required")


# (temperature, repeat penalty) by model: SmolLM2's card suggests a low temperature and the
# 135M model loops without a penalty; Qwen is best greedy (see the module docstring).
_SAMPLING = {"smollm2-135m": (0.2, 1.15)}
_DEFAULT_SAMPLING = (0.0, 1.1)


class LocalLLMError(RuntimeError):
    """llama.cpp rejected the request or failed while answering."""


class _Finished:
    """llama.cpp's ``finish_reason``, carried from its thread to the stream."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class LocalLLM:
    """:class:`~pipeline.services.llm.LLMService` on the shared embedded LLM.

    Each call's timing is on the :class:`~pipeline.services.llm.LLMStream` it returns:
    ``ttfb`` is the seconds from :meth:`stream` to the first content the model wrote
    (a held tool call's too; the first call's includes loading the model, unless it
    was loaded at start-up). Holds no per-conversation or per-call state: one instance
    serves every session. ``temperature`` and ``repeat_penalty`` default to the model's.
    """

    def __init__(
        self,
        models: EmbeddedModels | None = None,
        *,
        max_tokens: int = 120,
        temperature: float | None = None,
        top_p: float = 0.9,
        repeat_penalty: float | None = None,
    ) -> None:
        self._models = models or EmbeddedModels.shared()
        if max_tokens >= self._models.config.llm_context // 2:
            raise ValueError("max_tokens must be under half the context")
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.repeat_penalty = repeat_penalty

    @property
    def spec(self) -> LLMSpec:
        """The loaded model's spec (read each time: a fallback at load time changes it)."""
        return self._models.llm_spec

    @property
    def supports_tools(self) -> bool:
        return self.spec.supports_tools

    @property
    def model(self) -> str:
        return self.spec.label

    @property
    def window(self) -> ContextWindow:
        """The prompt budget of one slot: its context less the answer and the template."""
        return ContextWindow(self.spec.context - self.max_tokens - RESERVED_TOKENS)

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> LLMStream:
        """Stream one answer: text at once, tool calls (if the model takes tools) at the end."""
        return LLMStream(lambda call: self._answer(call, messages, tools, tool_choice))

    async def warm(self, system_prompt: str, tools: list[dict[str, Any]]) -> None:
        """Read the system prompt and tools into every llama.cpp slot's cache, so the
        first turn of each slot reads only its own words (a cold ~300-token prefix takes
        seconds on two cores)."""
        messages = [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": "Hello"},
        ]
        server = await self._models.llm.get()  # first: loading may change the spec
        request = {**self._request(messages, tools, None), "stream": False, "max_tokens": 1}
        request.pop("stream_options", None)
        pool = self._models.llm.pool
        await asyncio.gather(
            *(
                pool.run(_complete, server, {**request, "id_slot": slot})
                for slot in range(self._models.config.llm_workers)
            )
        )

    def _request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, tool_choice: Any
    ) -> dict[str, Any]:
        temperature, penalty = _SAMPLING.get(self.spec.name, _DEFAULT_SAMPLING)
        request: dict[str, Any] = {
            "stream": True,
            "max_tokens": self.max_tokens,
            "temperature": temperature if self.temperature is None else self.temperature,
            "top_p": self.top_p,
            "repeat_penalty": penalty if self.repeat_penalty is None else self.repeat_penalty,
            "stream_options": {"include_usage": True},
            "cache_prompt": True,
        }
        if not self.supports_tools:
            request["messages"] = self.window.fit(to_chat_messages(messages))
            return request
        request["messages"] = self.window.fit(to_tool_chat_messages(messages), tools_tokens(tools))
        if tools:
            request["tools"] = tools
            if tool_choice in _TOOL_CHOICES:
                request["tool_choice"] = tool_choice
        return request

    async def _answer(
        self,
        call: LLMStream,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: Any,
    ) -> AsyncGenerator[LLMChunk, None]:
        server = await self._models.llm.get()  # first: loading may change the spec
        request = self._request(messages, tools, tool_choice)
        content = ContentToolCalls() if request.get("tools") else None
        native = DeltaToolCalls()
        usage: UsageReport | None = None
        async with aclosing(self._models.llm.pool.stream(_producer(server, request))) as chunks:
            async for chunk in chunks:
                if isinstance(chunk, LocalLLMError):
                    raise chunk
                if isinstance(chunk, _Finished):
                    call.finish_reason = chunk.reason
                elif isinstance(chunk, UsageReport):
                    usage = chunk  # after the calls, as the OpenAI service does
                elif isinstance(chunk, dict):
                    call.first_token()
                    native.add(chunk)
                elif isinstance(chunk, TextDelta):
                    call.first_token()
                    for piece in content.feed(chunk.text) if content else (chunk,):
                        yield piece
        calls = [*(content.finish() if content else ()), *native.requests()]
        for piece in calls:
            yield piece
        if any(isinstance(c, ToolCallRequest) for c in calls):
            call.finish_reason = "tool_calls"
        if usage is not None:
            yield usage


def _complete(server: Server, request: dict[str, Any]) -> None:
    """One request run to its end, its answer ignored (a cache warm-up); raises
    :class:`LocalLLMError` if llama.cpp refused it."""
    errors: list[Any] = []

    def on_chunk(chunk: dict[str, Any]) -> bool:
        if "error" in chunk:
            errors.append(chunk["error"])
        return False

    server.handle_chat_completions(request, on_chunk)
    if errors:
        raise LocalLLMError(f"The local LLM failed: {errors[0]}")


def _usage(raw: dict[str, Any]) -> Usage:
    details = raw.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=raw.get("prompt_tokens") or 0,
        output_tokens=raw.get("completion_tokens") or 0,
        cache_read_tokens=details.get("cached_tokens") or 0,
    )


def _producer(
    server: Server, request: dict[str, Any]
) -> Callable[[Callable[[object], None], threading.Event], None]:
    def produce(emit: Callable[[object], None], stop: threading.Event) -> None:
        def on_chunk(chunk: dict[str, Any]) -> bool:
            if stop.is_set():
                return True  # cancels the llama.cpp task
            error = chunk.get("error")
            if error is not None:
                message = error.get("message", error) if isinstance(error, dict) else error
                emit(LocalLLMError(f"The local LLM failed: {message}"))
                return True
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                text = delta.get("content")
                if text:  # reasoning_content, if any, is thinking: dropped
                    emit(TextDelta(text))
                for tool_call in delta.get("tool_calls") or ():
                    emit(tool_call)  # a dict: joined by DeltaToolCalls
                if choice.get("finish_reason"):
                    emit(_Finished(str(choice["finish_reason"])))
            if chunk.get("usage"):
                emit(UsageReport(_usage(chunk["usage"])))
            return stop.is_set()

        server.handle_chat_completions(request, on_chunk)

    return produce
