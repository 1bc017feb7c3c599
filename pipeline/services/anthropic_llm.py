"""The LLM service for Anthropic's Messages API (``PARLEY_LLM=anthropic``).

Through the official SDK (``anthropic.AsyncAnthropic``): async, it streams the API's
server-sent events as typed events and takes a base URL (a proxy, a test's fake). Its
retries are off: an answer whose text may have been spoken is never asked for again.

The contract of :mod:`pipeline.services.openai_llm`: ``first_token_timeout`` bounds
connect + the first content, ``chunk_timeout`` each gap after it; timing per call on
the :class:`~pipeline.services.llm.LLMStream`, whose close closes the HTTP response.
The context is converted by :mod:`pipeline.services.anthropic_messages`. Events:
``text_delta`` → :class:`TextDelta`; ``thinking_delta`` (extended thinking, when
``thinking_budget`` > 0) → :class:`ReasoningDelta`, never text; ``input_json_delta``
fragments joined per block into :class:`ToolCallRequest` once the message ends; the
stop reason in OpenAI's words on ``finish_reason``; one :class:`UsageReport` last.
With thinking on, the API wants the signed thinking back with the tool calls it led
to: the service keeps it by tool-call id (the context has no place for it).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
from loguru import logger

from pipeline.messages import Usage
from pipeline.services import anthropic_messages as convert
from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import (
    ServiceAuthError,
    ServiceError,
    bad_response,
    from_status,
    map_error,
    service_name,
    timed_out,
    unreachable,
)
from pipeline.services.llm import (
    LLMChunk,
    LLMStream,
    ReasoningDelta,
    TextDelta,
    ToolCallRequest,
    UsageReport,
)
from pipeline.services.llm_calls import SERVICE, RemoteLLM

DEFAULT_MAX_TOKENS = 1024  # the API requires a limit
MIN_THINKING_BUDGET = 1024  # the API's smallest budget_tokens
FINISH_REASONS = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}
# The HTTP status each error type of the API comes with: an error *event* in a 200
# stream has only its type, and is classified as that status would be.
ERROR_STATUS = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
    "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
    "rate_limit_error": 429, "api_error": 500, "timeout_error": 504, "overloaded_error": 529,
}  # fmt: skip
COUNTS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
KEY_HINT = "Check ANTHROPIC_API_KEY."
MAX_REASON = 200  # of the vendor's reason shown with an auth error
KEPT_THOUGHTS = 256  # tool calls whose thinking is kept for the next request


@dataclass
class _Block:
    """One content block of the answer as it streams."""

    kind: str
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)  # tool input JSON, or thinking
    signature: str = ""
    data: str = ""  # a redacted thought

    def request(self) -> ToolCallRequest:
        raw = "".join(self.parts).strip()
        try:
            arguments = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            arguments = None
        if not isinstance(arguments, dict):
            what = f"the arguments of tool call {self.name!r} are not a valid JSON object"
            raise bad_response(SERVICE, what)
        return ToolCallRequest(self.id, self.name, arguments)

    def thought(self) -> dict[str, Any]:
        """The block as it must be sent back (thinking kinds only)."""
        if self.kind == "redacted_thinking":
            return {"type": "redacted_thinking", "data": self.data}
        return {"type": "thinking", "thinking": "".join(self.parts), "signature": self.signature}


# Where an answer's thinking goes once its tool calls are known: (calls, thinking blocks).
Keep = Callable[[list[ToolCallRequest], list[dict[str, Any]]], None]


class _Answer:
    """One answer read from its events: chunks out, blocks, stop reason and usage kept."""

    def __init__(self, call: LLMStream, keep: Keep) -> None:
        self.call = call
        self.keep = keep
        self.blocks: dict[int, _Block] = {}
        self.usage: dict[str, int] = {}
        self.thinking_tokens = 0
        self.stopped = False  # message_stop came: the answer is whole

    def read(self, event: Any) -> list[LLMChunk]:
        kind = event.type
        if kind == "content_block_start":
            self._start(event.index, event.content_block)
        elif kind == "content_block_delta":
            return self._delta(self.blocks.get(event.index), event.delta)
        elif kind == "message_start":
            self._count(event.message.usage)
        elif kind == "message_delta":
            if event.delta.stop_reason is not None:
                reason = str(event.delta.stop_reason)
                self.call.finish_reason = FINISH_REASONS.get(reason, reason)
            self._count(event.usage)
        elif kind == "message_stop":
            self.stopped = True
        return []  # content_block_stop, and event types newer than this code

    def _start(self, index: int, block: Any) -> None:
        kept = _Block(block.type)
        if block.type == "tool_use":
            kept.id, kept.name = block.id, block.name
            self.call.first_token()  # a tool call is content, as with chat completions
        elif block.type == "redacted_thinking":
            kept.data = block.data
        self.blocks[index] = kept

    def _delta(self, block: _Block | None, delta: Any) -> list[LLMChunk]:
        if block is None:
            raise bad_response(SERVICE, "a delta came for a block that never started")
        kind = delta.type
        chunks: list[LLMChunk] = []
        if kind == "text_delta" and delta.text:
            chunks.append(TextDelta(delta.text))
        elif kind == "thinking_delta" and delta.thinking:
            block.parts.append(delta.thinking)
            chunks.append(ReasoningDelta(delta.thinking))
        elif kind == "input_json_delta":
            block.parts.append(delta.partial_json)
        elif kind == "signature_delta":
            block.signature = delta.signature
        if chunks or kind == "input_json_delta":
            self.call.first_token()
        return chunks

    def _count(self, usage: Any) -> None:
        """Take the counts a usage object has: message_delta's are cumulative."""
        for name in COUNTS:
            value = getattr(usage, name, None)
            if isinstance(value, int):
                self.usage[name] = value
        details = getattr(usage, "output_tokens_details", None)
        thinking = getattr(details, "thinking_tokens", None)
        if isinstance(thinking, int):
            self.thinking_tokens = thinking

    def end(self) -> list[ToolCallRequest]:
        """The tool calls, their thinking kept (it must go back with their results)."""
        if not self.stopped:
            raise bad_response(SERVICE, "the stream ended mid-way (no message_stop)")
        ordered = [block for _, block in sorted(self.blocks.items())]
        calls = [block.request() for block in ordered if block.kind == "tool_use"]
        kinds = ("thinking", "redacted_thinking")
        self.keep(calls, [block.thought() for block in ordered if block.kind in kinds])
        return calls

    def report(self) -> UsageReport | None:
        if not self.usage:
            return None
        read = self.usage.get("cache_read_input_tokens", 0)
        written = self.usage.get("cache_creation_input_tokens", 0)
        usage = Usage(
            # The API counts cached input apart; Parley's input_tokens is all of it.
            input_tokens=self.usage.get("input_tokens", 0) + read + written,
            output_tokens=self.usage.get("output_tokens", 0),
            cache_read_tokens=read,
            cache_write_tokens=written,
        )
        return UsageReport(usage, self.thinking_tokens)


class AnthropicLLM(RemoteLLM):
    """Streams Messages API answers; see the module docstring."""

    unvalidated_items = "an event"  # the SDK builds events without validation

    def __init__(  # noqa: PLR0913  keyword-only provider options, as OpenAILLM's
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        supports_tools: bool = True,
        first_token_timeout: float = 10.0,
        chunk_timeout: float = 10.0,
        max_tokens: int | None = None,
        breaker: CircuitBreaker | None = None,
        thoughts_in_context: bool = False,
        thinking_budget: int = 0,
    ) -> None:
        super().__init__(
            model,
            supports_tools=supports_tools,
            first_token_timeout=first_token_timeout,
            chunk_timeout=chunk_timeout,
            breaker=breaker,
            thoughts_in_context=thoughts_in_context,
        )
        self.max_tokens = max_tokens or DEFAULT_MAX_TOKENS
        self.thinking_budget = max(thinking_budget, MIN_THINKING_BUDGET) if thinking_budget else 0
        self._thoughts: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key or "no-key-configured",  # a clear 401 rather than the SDK's TypeError
            base_url=base_url,
            max_retries=0,
            timeout=self.backstop,
        )

    def _request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, tool_choice: Any
    ) -> dict[str, Any]:
        with_tools = bool(tools) and self.supports_tools
        system, rest = convert.split_system(messages)
        turns = convert.to_messages(rest, with_tools=with_tools, thoughts=self._thoughts.get)
        request: dict[str, Any] = {"model": self.model, "messages": turns, "stream": True}
        request["max_tokens"] = self.max_tokens
        if system:
            request["system"] = system
        choice = None
        if tools and with_tools:
            request["tools"] = convert.tools_param(tools)
            choice = convert.tool_choice_param(tool_choice)
            if choice is not None:
                request["tool_choice"] = choice
        if self.thinking_budget and convert.thinking_allowed(turns, choice):
            request["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
            # The budget counts within max_tokens: on top, so the answer keeps its room.
            request["max_tokens"] = self.max_tokens + self.thinking_budget
        return request

    async def _open(
        self,
        deadline: float,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: Any,
    ) -> Any:
        request = self._request(messages, tools, tool_choice)
        return await self._begun(deadline, lambda: self._client.messages.create(**request))

    def _new_answer(self, call: LLMStream) -> _Answer:
        return _Answer(call, keep=self._remember)

    def _service_error(self, exc: BaseException, *, mid_stream: bool = False) -> ServiceError:
        return _mapped(exc, mid_stream=mid_stream)

    def _remember(self, calls: list[ToolCallRequest], thoughts: list[dict[str, Any]]) -> None:
        """Keep the thinking that led to ``calls``, for the request carrying their results."""
        if not calls or not thoughts:
            return
        self._thoughts[calls[0].tool_call_id] = thoughts
        while len(self._thoughts) > KEPT_THOUGHTS:
            self._thoughts.popitem(last=False)

    async def complete(self, messages: list[dict[str, Any]], max_tokens: int = 1024) -> str:
        """One non-streamed answer (for summaries); no tools, no thinking, no retries.
        Bounded by the client's HTTP timeout; wrap in ``asyncio.timeout`` for less."""
        system, rest = convert.split_system(messages)
        request: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens}
        request["messages"] = convert.to_messages(rest, with_tools=False)
        if system:
            request["system"] = system
        response = await self._once(lambda: self._client.messages.create(**request))
        try:
            return "".join(b.text for b in response.content if b.type == "text")
        except (AttributeError, TypeError) as exc:
            raise bad_response(SERVICE, "the answer had no content") from exc

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.close()


def _mapped(exc: BaseException, *, mid_stream: bool = False) -> ServiceError:
    """The :class:`ServiceError` for an SDK failure, what the API said logged once;
    transport and JSON failures the SDK lets through go to :func:`map_error`."""
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, anthropic.APITimeoutError):
        error: ServiceError = timed_out(SERVICE, "the request timed out")
    elif isinstance(exc, anthropic.APIConnectionError):
        cause = repr(exc.__cause__ or exc)
        what = "the stream ended mid-way (connection lost)"
        error = bad_response(SERVICE, what, cause) if mid_stream else unreachable(SERVICE, cause)
    elif isinstance(exc, anthropic.APIStatusError):
        error = _status_error(exc)
    elif isinstance(exc, anthropic.APIResponseValidationError):
        error = bad_response(SERVICE, "the answer did not match the expected schema")
    elif isinstance(exc, anthropic.APIError):
        error = bad_response(SERVICE, f"an unexpected {type(exc).__name__}", exc.message)
    else:
        return map_error(exc, SERVICE, mid_stream=mid_stream)
    if error.detail:
        logger.warning("{} {}", error.message, error.detail)
    return error


def _status_error(exc: anthropic.APIStatusError) -> ServiceError:
    """An HTTP error answer, or an ``error`` event in a 200 stream (classified by its
    type). A refused key says why, in the vendor's words: /health shows it."""
    body = json.dumps(exc.body, default=str) if exc.body is not None else ""
    kind = str(exc.type or "")
    in_stream = exc.status_code < 400
    status = ERROR_STATUS.get(kind, 500) if in_stream else exc.status_code
    error = from_status(SERVICE, status, body)
    name = service_name(SERVICE)
    if isinstance(error, ServiceAuthError):
        what = "rejected the API key" if status == 401 else "denied access"
        reason = (exc.api_message or kind or "no reason given")[:MAX_REASON]
        message = f"{name} {what} (HTTP {status}: {reason}). {KEY_HINT}"
    elif in_stream:
        message = f"{name} reported an error in its answer ({kind or 'unknown'})."
    elif status == 529:
        message = f"{name} is overloaded (HTTP 529); try again shortly."
    else:
        return error
    return type(error)(SERVICE, message, retryable=error.retryable, status=status, detail=body)
