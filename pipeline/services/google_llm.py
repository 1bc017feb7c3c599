"""The LLM service for Gemini (``PARLEY_LLM=google``), through Google's ``google-genai`` SDK:
Google's own async client, which streams (``streamGenerateContent?alt=sse``) and takes a
base URL (a proxy, or the tests' fake). :mod:`pipeline.services.google_contents` converts
the OpenAI-format context.

As :mod:`pipeline.services.openai_llm`: one streamed request per answer, no retries (the
SDK's are off: text already spoken must not be asked for again); ``first_token_timeout``
bounds connect + the first content, ``chunk_timeout`` each gap after it; timing is on
each call's :class:`LLMStream`. Gemini sends whole function calls: they are emitted when
the stream ends (id: Gemini's, else ``call_<n>``), then one :class:`UsageReport`. Thought
parts (asked for only with ``thinking_budget``) become :class:`ReasoningDelta`, never text.

The SDK gets its own ``httpx2`` client: its errors are those ``map_error`` knows (never
aiohttp's), and a closed stream closes its HTTP response at once (the SDK's nested
generators would only close it when collected). A refused key (401, 403, 400
``API_KEY_INVALID``) is a :class:`ServiceAuthError` quoting Google's reason, for /health.
Gemini 3 refuses a replayed function call without its thought signature, which the
context cannot hold: the service remembers them by call id, and sends Google's documented
placeholder for calls it never saw.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any

import httpx2
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from loguru import logger

from pipeline.messages import Usage
from pipeline.services import google_contents as convert
from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import (
    ServiceAuthError,
    ServiceError,
    ServiceHTTPError,
    bad_response,
    from_status,
    map_error,
    service_name,
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

# Sent when no key is configured: Google answers 400 API_KEY_INVALID, a clear auth error
# (an empty key would make the SDK look for one in the environment instead).
NO_KEY = "no-key-configured"
# Google's documented stand-in for a thought signature the client does not have.
SKIP_SIGNATURE = b"skip_thought_signature_validator"
SIGNATURES_KEPT = 4096  # call ids → thought signatures remembered (oldest dropped)
KEY_VARIABLES = "GOOGLE_API_KEY or GEMINI_API_KEY"  # where the operator sets the key
LONGEST_REASON = 300  # characters of Google's reason quoted in an auth error
FINISH_REASONS = {"STOP": "stop", "MAX_TOKENS": "length"}

# The HTTP responses opened by the request under way in this task (see _track).
_OPENED: ContextVar[list[httpx2.Response] | None] = ContextVar("gemini_opened", default=None)


async def _track(response: httpx2.Response) -> None:
    """httpx2 response hook: note the response for the stream whose request opened it."""
    opened = _OPENED.get()
    if opened is not None:
        opened.append(response)


def _needs_signatures(model: str) -> bool:
    """Gemini 3 and later refuse replayed function calls without a thought signature."""
    match = re.search(r"gemini-(\d+)", model)
    return match is not None and int(match.group(1)) >= 3


def _key_refused(exc: genai_errors.APIError) -> bool:
    if exc.code in (401, 403) or exc.status in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
        return True
    body = exc.details if isinstance(exc.details, dict) else {}
    error = body.get("error", body)
    details = error.get("details") if isinstance(error, dict) else None
    reasons = [d.get("reason", "") for d in details or () if isinstance(d, dict)]
    return exc.code == 400 and any(str(r).startswith("API_KEY_") for r in reasons)


def _api_error(exc: genai_errors.APIError) -> ServiceError:
    """The ServiceError for what Google answered; its whole answer is logged, once."""
    upstream = json.dumps(exc.details, ensure_ascii=False, default=str)
    code = exc.code if isinstance(exc.code, int) else 0
    if _key_refused(exc):
        reason = (exc.message or exc.status or "no reason given")[:LONGEST_REASON]
        what = f"refused the API key (HTTP {code}: {reason}). Check {KEY_VARIABLES}."
        error: ServiceError = ServiceAuthError(
            SERVICE, f"{service_name(SERVICE)} {what}", status=code, detail=upstream
        )
    elif code >= 400:
        error = from_status(SERVICE, code, upstream)
    else:  # an error event inside a stream that had answered 200
        what = f"{service_name(SERVICE)} reported an error in its answer."
        error = ServiceHTTPError(SERVICE, what, retryable=True, detail=upstream)
    logger.warning("{} {}", error.message, error.detail)
    return error


def _usage(meta: types.GenerateContentResponseUsageMetadata) -> UsageReport:
    # Gemini counts thoughts apart from the answer; Parley's output includes them.
    thoughts = meta.thoughts_token_count or 0
    usage = Usage(
        input_tokens=(meta.prompt_token_count or 0) + (meta.tool_use_prompt_token_count or 0),
        output_tokens=(meta.candidates_token_count or 0) + thoughts,
        cache_read_tokens=meta.cached_content_token_count or 0,
    )
    return UsageReport(usage, reasoning_tokens=thoughts)


def _finish_reason(raw: Any, called: bool) -> str:
    name = str(getattr(raw, "value", raw))
    if called and name == "STOP":
        return "tool_calls"  # Gemini says STOP after function calls too
    return FINISH_REASONS.get(name, name.lower())


class _Responses:
    """The SDK's iterator of responses, as the call reads it: the HTTP responses its
    requests open are noted (see :func:`_track`), so that closing it closes them at once
    (the SDK's inner generators would only close them when garbage-collected)."""

    def __init__(self, responses: AsyncIterator[types.GenerateContentResponse]) -> None:
        self._responses = responses
        self._opened: list[httpx2.Response] = []

    async def __anext__(self) -> types.GenerateContentResponse:
        token = _OPENED.set(self._opened)  # for _track, should this item open a request
        try:
            return await anext(self._responses)
        finally:
            _OPENED.reset(token)

    async def close(self) -> None:
        aclose = getattr(self._responses, "aclose", None)
        try:
            if aclose is not None:
                await aclose()
        finally:
            for response in self._opened:
                await response.aclose()


class _Answer:
    """One answer read from its responses: deltas out; calls, usage and finish kept."""

    def __init__(self, call: LLMStream, tool_call: Callable[[types.Part], ToolCallRequest]) -> None:
        self.call = call
        self.tool_call = tool_call  # the service's: it numbers calls, keeps their signatures
        self.calls: list[ToolCallRequest] = []
        self.usage: UsageReport | None = None
        self.finish: Any = None

    def read(self, response: types.GenerateContentResponse) -> list[LLMChunk]:
        if response.usage_metadata is not None:
            self.usage = _usage(response.usage_metadata)  # running totals: the last wins
        feedback = response.prompt_feedback
        if not response.candidates and feedback is not None and feedback.block_reason:
            self.finish = feedback.block_reason  # the prompt was refused: no answer
        chunks: list[LLMChunk] = []
        for candidate in (response.candidates or [])[:1]:
            if candidate.finish_reason is not None:
                self.finish = candidate.finish_reason
            for part in (candidate.content.parts if candidate.content else None) or ():
                if part.function_call is not None:
                    self.calls.append(self.tool_call(part))
                    self.call.first_token()
                elif part.text:
                    chunks.append(
                        ReasoningDelta(part.text) if part.thought else TextDelta(part.text)
                    )
                    self.call.first_token()
        return chunks

    def end(self) -> list[ToolCallRequest]:
        if self.finish is None:
            raise bad_response(SERVICE, "the stream ended mid-way (no finish reason)")
        self.call.finish_reason = _finish_reason(self.finish, bool(self.calls))
        return self.calls

    def report(self) -> UsageReport | None:
        return self.usage


class GoogleLLM(RemoteLLM):
    """Streams Gemini answers; see the module docstring for timing, tools and errors."""

    begun_on_open = False  # the SDK sends the request on the first item, not at _open

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
        thinking_budget: int | None = None,
    ) -> None:
        super().__init__(
            model,
            supports_tools=supports_tools,
            first_token_timeout=first_token_timeout,
            chunk_timeout=chunk_timeout,
            breaker=breaker,
            thoughts_in_context=thoughts_in_context,
        )
        self.max_tokens = max_tokens  # None: the model's own limit
        self.thinking_budget = thinking_budget  # None: no thoughts asked for
        self._ids = itertools.count()
        self._signatures: OrderedDict[str, bytes] = OrderedDict()
        self._http = httpx2.AsyncClient(timeout=self.backstop, event_hooks={"response": [_track]})
        options = types.HttpOptions(
            base_url=base_url,
            timeout=int(self.backstop * 1000),  # ms; unset, the SDK would send no timeout at all
            retry_options=types.HttpRetryOptions(attempts=1),  # and no implicit retries
            httpx_async_client=self._http,
        )
        self._client = genai.Client(vertexai=False, api_key=api_key or NO_KEY, http_options=options)

    def _contents(self, messages: list[dict[str, Any]]) -> list[types.Content]:
        fallback = SKIP_SIGNATURE if _needs_signatures(self.model) else None
        return convert.to_contents(messages, self._signatures, fallback)

    def _config(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: Any,
        max_tokens: int | None,
    ) -> types.GenerateContentConfig:
        config = types.GenerateContentConfig(
            system_instruction=convert.system_instruction(messages),
            max_output_tokens=max_tokens or None,
            # The SDK would run Python functions itself; Parley runs its own tools.
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        )
        if tools and self.supports_tools:
            config.tools = list(convert.to_tools(tools)) or None
            config.tool_config = convert.to_tool_config(tool_choice)
        if self.thinking_budget is not None:
            config.thinking_config = types.ThinkingConfig(
                include_thoughts=True, thinking_budget=self.thinking_budget
            )
        return config

    async def _open(
        self,
        deadline: float,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: Any,
    ) -> _Responses:
        """The SDK's iterator: the request goes out on its first item, under the first
        token's deadline, so building it has no deadline of its own."""
        config = self._config(messages, tools, tool_choice, self.max_tokens)
        try:
            responses = await self._client.aio.models.generate_content_stream(
                model=self.model, contents=self._contents(messages), config=config
            )
        except Exception as exc:
            raise self._service_error(exc) from exc
        return _Responses(responses)

    def _new_answer(self, call: LLMStream) -> _Answer:
        return _Answer(call, tool_call=self._tool_call)

    def _service_error(self, exc: BaseException, *, mid_stream: bool = False) -> ServiceError:
        if isinstance(exc, genai_errors.APIError):
            return _api_error(exc)
        if isinstance(exc, genai_errors.UnknownApiResponseError):
            return bad_response(SERVICE, "a chunk was not valid JSON")
        return map_error(exc, SERVICE, mid_stream=mid_stream)

    def _tool_call(self, part: types.Part) -> ToolCallRequest:
        function = part.function_call
        if function is None or not function.name:
            raise bad_response(SERVICE, "a function call had no name")
        call_id = function.id or f"call_{next(self._ids)}"
        if part.thought_signature:
            # Sent back with this call in later turns (Gemini 3 insists).
            self._signatures[call_id] = part.thought_signature
            while len(self._signatures) > SIGNATURES_KEPT:
                self._signatures.popitem(last=False)
        return ToolCallRequest(call_id, function.name, dict(function.args or {}))

    async def complete(self, messages: list[dict[str, Any]], max_tokens: int = 1024) -> str:
        """One non-streamed answer (for summaries); no tools, no retries. Bounded by the
        HTTP timeout; wrap in ``asyncio.timeout`` for a tighter limit."""
        response = await self._once(
            lambda: self._client.aio.models.generate_content(
                model=self.model,
                contents=self._contents(messages),
                config=self._config(messages, None, None, max_tokens),
            )
        )
        candidates = response.candidates or []
        content = candidates[0].content if candidates else None
        parts = (content.parts if content else None) or []
        return "".join(p.text for p in parts if p.text and not p.thought)

    async def aclose(self) -> None:
        """Close the HTTP clients (the SDK leaves the one it was given to its owner)."""
        await self._http.aclose()
        self._client.close()
