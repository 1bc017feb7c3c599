"""How the remote LLM services make their calls, written once for all of them.

The OpenAI-compatible, Anthropic and Gemini services differ in their requests, their
streams' items and their SDKs' errors; how a call is run around those is the same, and
lives here so that it stays the same:

- the circuit breaker's view of one call (:func:`guarded`, which the OpenAI endpoint's
  STT and TTS use too);
- :meth:`RemoteLLM.stream`: an :class:`LLMStream` whose close reaches the HTTP response
  at once (a barge-in);
- the two deadlines: ``first_token_timeout`` bounds connect + headers + the first
  content, ``chunk_timeout`` each gap after it (``asyncio.timeout`` per item, never
  ``wait_for``: on 3.11 it can swallow a cancellation);
- the end: the vendor says whether the answer is whole, then come the tool calls, then
  the usage; the breaker counts the outcome;
- :meth:`RemoteLLM._once`, the one non-streamed request of ``complete``.

A vendor's service subclasses :class:`RemoteLLM` and supplies ``_open`` (its request,
sent), ``_new_answer`` (an :class:`Answer` that reads its items) and, where its SDK is
not OpenAI's, ``_service_error``.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from typing import Any, Protocol, TypeVar

from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import ServiceError, bad_response, map_error, timed_out
from pipeline.services.llm import LLMChunk, LLMStream, ToolCallRequest, UsageReport

SERVICE = "llm"
T = TypeVar("T")


@contextlib.contextmanager
def guarded(breaker: CircuitBreaker | None) -> Iterator[None]:
    """One call, retries included, as ``breaker`` sees it: refused at once while it is
    open (raises :class:`~pipeline.services.circuit.ServiceUnavailableError`); a
    :class:`ServiceError` counts as one failure, a normal exit as a success, anything
    else (a cancelled or closed stream) as neither."""
    if breaker is None:
        yield
        return
    breaker.check()
    try:
        yield
    except ServiceError as exc:
        breaker.failed(exc)
        raise
    except BaseException:
        breaker.abandoned()
        raise
    breaker.succeeded()


class Items(Protocol):
    """A vendor's response stream as the call reads it: its items (chunks, events), and a
    close that drops the connection."""

    async def __anext__(self) -> Any: ...

    async def close(self) -> None: ...


class Answer(Protocol):
    """One call's answer as a vendor reads it from its stream's items: deltas out as they
    come, what only counts at the end (tool calls, usage, finish) kept."""

    def read(self, item: Any) -> list[LLMChunk]:
        """The deltas ``item`` brings; calls ``LLMStream.first_token`` when content comes."""
        ...

    def end(self) -> list[ToolCallRequest]:
        """The stream is over: its tool calls, joined. Raises a
        :class:`~pipeline.services.errors.ServiceBadResponseError` if it stopped short."""
        ...

    def report(self) -> UsageReport | None:
        """The call's usage, if the vendor counted it."""
        ...


class RemoteLLM(ABC):
    """A streaming LLM service over a vendor's SDK; see the module docstring."""

    # Whether the answer has begun once ``_open`` returns (its headers came): a connection
    # lost at any item then cuts the answer short, rather than never reaching the service.
    begun_on_open = True
    # What the stream's items are called in an error ("a chunk"), where the SDK builds them
    # without validation, so that garbage shows up as AttributeError or TypeError; None
    # where it validates them (those errors are then bugs, and left as they are).
    unvalidated_items: str | None = None

    def __init__(
        self,
        model: str,
        *,
        supports_tools: bool,
        first_token_timeout: float,
        chunk_timeout: float,
        breaker: CircuitBreaker | None,
        thoughts_in_context: bool,
    ) -> None:
        self.model = model
        self.supports_tools = supports_tools
        self.first_token_timeout = first_token_timeout
        self.chunk_timeout = chunk_timeout
        self.breaker = breaker
        # Whether the model's reasoning is kept in the context (it is never sent back).
        self.thoughts_in_context = thoughts_in_context

    @property
    def backstop(self) -> float:
        """The HTTP client's timeout: our own timeouts fire first, with clearer messages."""
        return 2 * max(self.first_token_timeout, self.chunk_timeout)

    @abstractmethod
    async def _open(
        self,
        deadline: float,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: Any,
    ) -> Items:
        """Send the request; its stream, begun before ``deadline`` where opening waits."""

    @abstractmethod
    def _new_answer(self, call: LLMStream) -> Answer:
        """A reader for the items of ``call``'s stream."""

    def _service_error(self, exc: BaseException, *, mid_stream: bool = False) -> ServiceError:
        """The :class:`ServiceError` for a failure of the SDK (here: OpenAI's)."""
        return map_error(exc, SERVICE, mid_stream=mid_stream)

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> LLMStream:
        """Reasoning and text deltas as they come, then the tool calls, then usage."""
        return LLMStream(
            lambda call: self._guarded(self._chunks(call, messages, tools, tool_choice))
        )

    async def _guarded(
        self, chunks: AsyncGenerator[LLMChunk, None]
    ) -> AsyncGenerator[LLMChunk, None]:
        """``chunks`` as one call for the breaker; closing this closes them."""
        with guarded(self.breaker):
            # aclosing: a barge-in's close reaches the HTTP stream at once.
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    yield chunk

    async def _chunks(
        self,
        call: LLMStream,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: Any,
    ) -> AsyncGenerator[LLMChunk, None]:
        loop = asyncio.get_running_loop()
        first_deadline = loop.time() + self.first_token_timeout
        items = await self._open(first_deadline, messages, tools, tool_choice)
        answer = self._new_answer(call)
        begun = self.begun_on_open
        try:
            while True:
                # This call's own first token, never another session's; items that are
                # not content (pings, a role-only chunk) do not count.
                waiting_first = call.ttfb is None
                limit = first_deadline - loop.time() if waiting_first else self.chunk_timeout
                item = await self._next(items, limit, waiting_first, mid_stream=begun)
                if item is None:
                    break
                begun = True
                for chunk in answer.read(item):
                    yield chunk
            for request in answer.end():
                yield request
            if (usage := answer.report()) is not None:
                yield usage
        except (AttributeError, TypeError) as exc:
            if self.unvalidated_items is None:
                raise
            what = f"{self.unvalidated_items} was malformed ({exc})"
            raise bad_response(SERVICE, what) from exc
        finally:
            # Runs on aclose (barge-in) too: closing the response drops the connection.
            await items.close()

    async def _next(self, items: Items, limit: float, first: bool, *, mid_stream: bool) -> Any:
        """The next item, or ``None`` at the end; typed errors for stalls and failures."""
        try:
            async with asyncio.timeout(max(limit, 0.0)):
                return await anext(items)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            if first:
                detail = f"no first token within {self.first_token_timeout:g} s"
            else:
                detail = f"the stream stalled for more than {self.chunk_timeout:g} s"
            raise timed_out(SERVICE, detail) from None
        except Exception as exc:
            raise self._service_error(exc, mid_stream=mid_stream) from exc

    async def _begun(self, deadline: float, request: Callable[[], Awaitable[T]]) -> T:
        """What ``request`` answers (a response stream), before ``deadline``: the first
        token's, so that connect + headers count against ``first_token_timeout``."""
        try:
            async with asyncio.timeout_at(deadline):
                return await request()
        except TimeoutError:
            raise timed_out(SERVICE, f"no answer within {self.first_token_timeout:g} s") from None
        except Exception as exc:
            raise self._service_error(exc) from exc

    async def _once(self, request: Callable[[], Awaitable[T]]) -> T:
        """One non-streamed request (``complete``'s), under the breaker, its failure mapped;
        no retries. A callable, so that a refusing breaker leaves no coroutine unawaited."""
        with guarded(self.breaker):
            try:
                return await request()
            except Exception as exc:
                raise self._service_error(exc) from exc
