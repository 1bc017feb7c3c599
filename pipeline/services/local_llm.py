"""The LLM on the embedded SmolLM2-135M-Instruct (GGUF Q4_1), run by llama.cpp in-process.

Approach: xllamacpp's ``Server.handle_chat_completions(request, callback)``, called in
a worker of the LLM pool. The request is an OpenAI chat-completions dict; llama.cpp
applies the model's own chat template (ChatML from the GGUF) and calls ``callback``
with each streamed chunk, already parsed, in the calling thread. Returning True from
the callback cancels the task in llama.cpp (measured: generation stops ~20 ms after).
We prefer this over the same server's loopback HTTP address: no socket, no SSE to
parse, no second client; cancellation is a return value rather than a dropped
connection; and the LLM waits in the same bounded pool as STT and TTS, so overload
gives ``PoolSaturated`` instead of a hidden llama.cpp queue. The GIL is released while
llama.cpp decodes, so the event loop keeps running.

SmolLM2-135M cannot call tools: ``supports_tools`` is False and tools are never sent.
The template only knows text, so messages are reduced to the roles it was trained on
(see :func:`to_chat_messages`) and trimmed to the context (see :class:`ContextWindow`).
Answers are capped (``max_tokens``, 120 by default: a spoken answer, and the model
rambles). Closing the stream early stops the generation at the next token; a prompt
still being read (prefill, ~300 tokens/s here) is not interruptible, so at worst the
worker frees after that.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from pipeline.messages import Usage
from pipeline.services.embedded import EmbeddedModels
from pipeline.services.llm import LLMChunk, LLMStream, TextDelta, UsageReport

if TYPE_CHECKING:
    from xllamacpp import Server

# Token estimate without a tokenizer call: SmolLM2's BPE gives ~3.7 bytes per token on
# English; 3 over-counts on purpose (measured: ~1.5x the real prompt on English chat),
# leaving room for text that tokenizes worse. Each message's ChatML markers come on top.
_BYTES_PER_TOKEN = 3
_MESSAGE_TOKENS = 6
_RESERVED_TOKENS = 32  # the generation prompt, and the default system prompt if none
# History is cut at steps of this share of the room, so after a cut the next turns keep
# the same first message (and llama.cpp's cached prompt) until they fill it again.
_REFILL_SHARE = 0.5


class LocalLLMError(RuntimeError):
    """llama.cpp rejected the request or failed while answering."""


class _Finished:
    """llama.cpp's ``finish_reason``, carried from its thread to the stream."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # typed parts: keep the text, drop images and audio
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def to_chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """OpenAI wire messages → ``{"role", "content"}`` with system/user/assistant only.

    developer → system; a tool result → a system note naming the tool; an assistant's
    tool calls and any thinking are dropped (only its text is kept); messages left
    without text are dropped.
    """
    tool_names: dict[str, str] = {}
    out: list[dict[str, str]] = []
    for message in messages:
        role = message.get("role")
        text = _text(message.get("content")).strip()
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                name = (call.get("function") or {}).get("name")
                tool_names[call.get("id", "")] = name or "a tool"
        if role in ("system", "developer"):
            role = "system"
        elif role == "tool":
            name = message.get("name") or tool_names.get(message.get("tool_call_id", ""))
            text = f"Result of {name or 'a tool'}: {text}" if text else ""
            role = "system"
        elif role not in ("user", "assistant"):
            continue
        if text:
            out.append({"role": role, "content": text})
    return out


def estimate_tokens(message: dict[str, str]) -> int:
    """A safe over-estimate of a message's tokens in the prompt."""
    return -(-len(message["content"].encode()) // _BYTES_PER_TOKEN) + _MESSAGE_TOKENS


def _clip(message: dict[str, str], tokens: int, keep_end: bool) -> dict[str, str]:
    """The message cut to ``tokens``, keeping its end (a question) or its start."""
    data = message["content"].encode()
    room = max(0, (tokens - _MESSAGE_TOKENS) * _BYTES_PER_TOKEN)
    cut = data[len(data) - room :] if keep_end else data[:room]
    return {"role": message["role"], "content": cut.decode(errors="ignore")}


class ContextWindow:
    """Keeps a conversation within ``budget`` prompt tokens, dropping the oldest turns.

    Leading system messages always stay (clipped to half the budget at most). History
    is cut only at fixed steps of half the remaining room, counted from the oldest
    message: appending turns does not move those steps, so successive turns keep the
    same first message until the next step is needed, and llama.cpp reuses its cached
    prompt instead of reading the whole context again each turn. Holds no state, so
    one window serves any number of conversations.
    """

    def __init__(self, budget: int) -> None:
        if budget < 4 * _MESSAGE_TOKENS:
            raise ValueError("budget is too small for any message")
        self.budget = budget

    def fit(self, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        head_end = next((i for i, m in enumerate(messages) if m["role"] != "system"), None)
        if head_end is None:  # only system text
            return self._clip_head(messages)
        head = self._clip_head(messages[:head_end])
        body = messages[head_end:]
        room = self.budget - sum(estimate_tokens(m) for m in head)
        costs = [estimate_tokens(m) for m in body]
        if sum(costs) <= room:
            return head + body
        start = self._cut(body, costs, room)
        kept = body[start:]
        if sum(costs[start:]) > room:  # the last message alone is too long
            kept = [_clip(kept[-1], room, keep_end=True)]
        return head + kept

    def _clip_head(self, head: list[dict[str, str]]) -> list[dict[str, str]]:
        # A system prompt may use at most half the budget; its start matters most.
        share = self.budget // 2 // max(len(head), 1)
        return [m if estimate_tokens(m) <= share else _clip(m, share, False) for m in head]

    @staticmethod
    def _cut(body: list[dict[str, str]], costs: list[int], room: int) -> int:
        """Index of the first kept message: the first step boundary whose suffix fits,
        moved on to a user message when one is in reach (the template expects one)."""
        step = max(1, int(room * _REFILL_SHARE))
        last = len(body) - 1
        start, prefix, suffix, boundary = last, 0, sum(costs), step
        for index in range(last):
            prefix += costs[index]  # tokens before index + 1
            suffix -= costs[index]  # tokens from index + 1 on
            if prefix >= boundary:  # index + 1 is the first message past a step
                if suffix <= room:
                    start = index + 1
                    break
                boundary = (prefix // step + 1) * step
        for index in range(start, last + 1):
            if body[index]["role"] == "user":
                return index
        return start


class LocalLLM:
    """:class:`~pipeline.services.llm.LLMService` on the shared embedded SmolLM2.

    Each call's timing is on the :class:`~pipeline.services.llm.LLMStream` it returns:
    ``ttfb`` is the seconds from :meth:`stream` to the first text (the first call's
    includes loading the model, unless it was loaded at start-up). Holds no
    per-conversation or per-call state: one instance serves every session.
    """

    supports_tools = False
    model = "SmolLM2-135M-Instruct"

    def __init__(
        self,
        models: EmbeddedModels | None = None,
        *,
        max_tokens: int = 120,
        temperature: float = 0.2,
        top_p: float = 0.9,
        repeat_penalty: float = 1.15,
    ) -> None:
        self._models = models or EmbeddedModels.shared()
        context = self._models.config.llm_context
        if max_tokens >= context // 2:
            raise ValueError("max_tokens must be under half the context")
        self.max_tokens = max_tokens
        # SmolLM2's card suggests a low temperature; higher makes the tiny model wander.
        self.temperature = temperature
        self.top_p = top_p
        # At a low temperature the 135M model loops on a phrase; a mild penalty stops it.
        self.repeat_penalty = repeat_penalty
        self.window = ContextWindow(context - max_tokens - _RESERVED_TOKENS)

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> LLMStream:
        """Stream one answer; ``tools`` and ``tool_choice`` are ignored (no tool calls)."""
        return LLMStream(lambda call: self._answer(call, messages))

    async def _answer(
        self, call: LLMStream, messages: list[dict[str, Any]]
    ) -> AsyncGenerator[LLMChunk, None]:
        request = {
            "messages": self.window.fit(to_chat_messages(messages)),
            "stream": True,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "repeat_penalty": self.repeat_penalty,
            "stream_options": {"include_usage": True},
            "cache_prompt": True,
        }
        server = await self._models.llm.get()
        async with aclosing(self._models.llm.pool.stream(_producer(server, request))) as chunks:
            async for chunk in chunks:
                if isinstance(chunk, LocalLLMError):
                    raise chunk
                if isinstance(chunk, _Finished):
                    call.finish_reason = chunk.reason
                    continue
                if isinstance(chunk, TextDelta):
                    call.first_token()
                yield chunk


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
                text = (choice.get("delta") or {}).get("content")
                if text:  # reasoning_content, if any, is thinking: dropped
                    emit(TextDelta(text))
                if choice.get("finish_reason"):
                    emit(_Finished(str(choice["finish_reason"])))
            if chunk.get("usage"):
                emit(UsageReport(_usage(chunk["usage"])))
            return stop.is_set()

        server.handle_chat_completions(request, on_chunk)

    return produce
