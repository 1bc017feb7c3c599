"""The LLM service for any OpenAI-compatible chat-completions endpoint.

One streamed request per answer, no retries: once text has been spoken, asking again
would repeat it. Timeouts: ``first_token_timeout`` bounds connect + headers + the first
content; after that, ``chunk_timeout`` bounds each gap between chunks. Each call's
timing is on the :class:`~pipeline.services.llm.LLMStream` it returns (one service
serves every session, so nothing per call is kept on it):

- ``ttfb``: seconds from the call to the first content (a text, reasoning or tool-call
  delta; the empty role-only first chunk does not count), ``None`` if none came.
- ``duration``: seconds from the call to the stream's end, error or early close.

Tool calls arrive as deltas keyed by ``index`` (id and name first, arguments in
fragments, several calls interleaved); they are joined and emitted as
:class:`ToolCallRequest` once the stream has finished. Arguments that are not a JSON
object fail the stream with :class:`ServiceBadResponseError` (strict on purpose: a tool
run on guessed arguments is worse than a clear error); empty arguments mean ``{}``.

Reasoning models stream their thought in a delta field the chat-completions API does
not define: ``reasoning_content`` (vLLM, llama.cpp server, DeepSeek) or ``reasoning``
(OpenRouter, Ollama, newer vLLM). Either becomes a :class:`ReasoningDelta`, never text:
it is shown to clients and counted, never spoken. Reasoning counts as content for the
timeouts (a model that thinks for a while is alive) and for ``ttfb``. The endpoint's
count of reasoning tokens (``completion_tokens_details.reasoning_tokens``), if any,
rides on the :class:`UsageReport`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

from pipeline.messages import Usage
from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import bad_response
from pipeline.services.llm import (
    LLMChunk,
    LLMStream,
    ReasoningDelta,
    TextDelta,
    ToolCallRequest,
    UsageReport,
)
from pipeline.services.llm_calls import SERVICE, RemoteLLM
from pipeline.services.openai_client import OpenAIEndpoint

# The delta fields servers put reasoning in, first found wins (some send both, the same).
REASONING_FIELDS = ("reasoning_content", "reasoning")


@dataclass
class _PartialCall:
    """One tool call being assembled from its deltas."""

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def request(self) -> ToolCallRequest:
        raw = "".join(self.arguments).strip()
        try:
            arguments = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            raise bad_response(
                SERVICE, f"the arguments of tool call {self.name!r} are not valid JSON"
            ) from None
        if not isinstance(arguments, dict):
            raise bad_response(
                SERVICE, f"the arguments of tool call {self.name!r} are not an object"
            )
        return ToolCallRequest(self.id, self.name, arguments)


class _ToolCallJoiner:
    """Joins streamed tool-call deltas by index, in the order the calls began."""

    def __init__(self) -> None:
        self._calls: dict[int, _PartialCall] = {}

    def add(self, delta: Any) -> None:
        index = delta.index
        if index is None:
            # Some servers omit the index: a new id starts a call, fragments extend the last.
            index = len(self._calls) if delta.id or not self._calls else max(self._calls)
        call = self._calls.setdefault(index, _PartialCall())
        if delta.id:
            call.id = delta.id
        function = delta.function
        if function is not None:
            if function.name:
                call.name += function.name
            if function.arguments:
                call.arguments.append(function.arguments)

    def requests(self) -> list[ToolCallRequest]:
        return [call.request() for _, call in sorted(self._calls.items())]


def _reasoning(delta: Any) -> str:
    for name in REASONING_FIELDS:
        value = getattr(delta, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


def _delta_chunks(delta: Any, calls: _ToolCallJoiner, call: LLMStream) -> list[LLMChunk]:
    """What one choice's delta brings: reasoning, then text; tool-call fragments go to
    ``calls`` (joined at the end). Any of them is the call's first token."""
    if delta is None:
        return []
    chunks: list[LLMChunk] = []
    if reasoning := _reasoning(delta):
        chunks.append(ReasoningDelta(reasoning))
    for tool_call in delta.tool_calls or ():
        calls.add(tool_call)
        call.first_token()
    if delta.content:
        chunks.append(TextDelta(delta.content))
    if chunks:
        call.first_token()
    return chunks


def _reasoning_tokens(raw: Any) -> int:
    details = getattr(raw, "completion_tokens_details", None)
    tokens = getattr(details, "reasoning_tokens", None)
    return tokens if isinstance(tokens, int) else 0


def _usage(raw: Any) -> Usage:
    details = getattr(raw, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return Usage(
        input_tokens=raw.prompt_tokens or 0,
        output_tokens=raw.completion_tokens or 0,
        cache_read_tokens=cached,
    )


class _Answer:
    """One answer read from its chunks: deltas out; tool calls, usage and finish kept."""

    def __init__(self, call: LLMStream) -> None:
        self.call = call
        self.calls = _ToolCallJoiner()
        self.usage: UsageReport | None = None
        self.finished = False

    def read(self, chunk: ChatCompletionChunk) -> list[LLMChunk]:
        if chunk.usage is not None:
            self.usage = UsageReport(_usage(chunk.usage), _reasoning_tokens(chunk.usage))
        pieces: list[LLMChunk] = []
        for choice in chunk.choices:
            if choice.finish_reason is not None:
                self.finished = True
                self.call.finish_reason = str(choice.finish_reason)
            pieces += _delta_chunks(choice.delta, self.calls, self.call)
        return pieces

    def end(self) -> list[ToolCallRequest]:
        if not self.finished:
            raise bad_response(SERVICE, "the stream ended mid-way (no finish reason)")
        return self.calls.requests()

    def report(self) -> UsageReport | None:
        return self.usage


class OpenAILLM(OpenAIEndpoint, RemoteLLM):
    """Streams chat completions; see the module docstring for timing and tool calls."""

    unvalidated_items = "a chunk"  # the SDK builds chunks without validation

    def __init__(  # noqa: PLR0913  keyword-only provider options, as the OpenAI client's
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        supports_tools: bool = True,
        first_token_timeout: float = 10.0,
        chunk_timeout: float = 10.0,
        include_usage: bool = True,
        client: openai.AsyncOpenAI | None = None,
        extra_body: dict[str, Any] | None = None,
        breaker: CircuitBreaker | None = None,
        max_tokens: int | None = None,
        thoughts_in_context: bool = False,
    ) -> None:
        # Each base sets its own part, explicitly (neither knows of the other): the call's
        # options first, as the client's timeout (the backstop) is made from them.
        RemoteLLM.__init__(
            self,
            model,
            supports_tools=supports_tools,
            first_token_timeout=first_token_timeout,
            chunk_timeout=chunk_timeout,
            breaker=breaker,
            thoughts_in_context=thoughts_in_context,
        )
        # Longest answer, sent as max_tokens; None sends none (the endpoint's own limit).
        self.max_tokens = max_tokens
        self.include_usage = include_usage
        self.extra_body = extra_body
        OpenAIEndpoint.__init__(
            self, client, base_url=base_url, api_key=api_key, timeout=self.backstop, breaker=breaker
        )

    def _request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, tool_choice: Any
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
        if self.max_tokens:
            kwargs["max_tokens"] = self.max_tokens
        if self.include_usage:
            kwargs["stream_options"] = {"include_usage": True}
        if tools and self.supports_tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        return kwargs

    async def _open(
        self,
        deadline: float,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: Any,
    ) -> openai.AsyncStream[ChatCompletionChunk]:
        request = self._request(messages, tools, tool_choice)
        return await self._begun(deadline, lambda: self._client.chat.completions.create(**request))

    def _new_answer(self, call: LLMStream) -> _Answer:
        return _Answer(call)

    async def complete(self, messages: list[dict[str, Any]], max_tokens: int = 1024) -> str:
        """One non-streamed answer (for summaries); no tools, no retries. Bounded by the
        client's HTTP timeout; wrap in ``asyncio.timeout`` for a tighter limit."""
        response = await self._once(
            lambda: self._client.chat.completions.create(
                model=self.model,
                # cast: the context's to_openai dicts are chat-completions messages.
                messages=cast("list[ChatCompletionMessageParam]", messages),
                max_tokens=max_tokens,
                extra_body=self.extra_body,
            )
        )
        try:
            return response.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError) as exc:
            raise bad_response(SERVICE, "the answer had no message") from exc
