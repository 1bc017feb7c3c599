"""The LLM interface: a stream of text deltas, reasoning, tool calls and usage for one context."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pipeline.messages import Usage
from pipeline.services.closable import ClosableStream


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of the model's reasoning (its "thought"): shown to clients, never spoken."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A complete tool call (the service joins the streamed argument fragments)."""

    tool_call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AudioDelta:
    """Spoken audio from a model that answers in speech (a speech-to-speech model):
    mono int16 PCM at ``sample_rate``. Its transcript comes as :class:`TextDelta`."""

    pcm: bytes
    sample_rate: int


@dataclass(frozen=True, slots=True)
class UsageReport:
    usage: Usage
    reasoning_tokens: int = 0  # of ``usage.output_tokens``, when the endpoint says


LLMChunk = TextDelta | ReasoningDelta | ToolCallRequest | UsageReport | AudioDelta


class LLMStream:
    """One call's answer as it streams, with that call's own timing.

    One LLM service serves every session at once, so what a call measures lives here,
    never on the service (where overlapping calls would overwrite each other):

    - ``ttfb``: seconds from the call to its first content (text or a tool-call delta),
      ``None`` until then, or if none came;
    - ``duration``: seconds from the call to the stream's end (exhausted, failed or
      closed), ``None`` while it runs;
    - ``finish_reason``: why the model stopped, as the provider said it ("stop",
      "length", "tool_calls"…), ``None`` if it did not say (yet).

    ``body`` makes the chunks; it gets this stream, to call :meth:`first_token` when
    content arrives. Closing the stream (``aclose``) closes ``body``, and its request.
    """

    def __init__(self, body: Callable[[LLMStream], AsyncGenerator[LLMChunk, None]]) -> None:
        self._started = time.perf_counter()
        self.ttfb: float | None = None
        self.duration: float | None = None
        self.finish_reason: str | None = None
        self._chunks = body(self)

    def first_token(self) -> None:
        """Content arrived; only the first call counts."""
        if self.ttfb is None:
            self.ttfb = time.perf_counter() - self._started

    def __aiter__(self) -> LLMStream:
        return self

    async def __anext__(self) -> LLMChunk:
        try:
            return await self._chunks.__anext__()
        except BaseException:  # the end, a failure or a cancellation: the stream is over
            self._ended()
            raise

    async def aclose(self) -> None:
        try:
            await self._chunks.aclose()
        finally:
            self._ended()

    def _ended(self) -> None:
        if self.duration is None:
            self.duration = time.perf_counter() - self._started


class LLMService(Protocol):
    """Streams one answer. Closing the iterator early (``aclose``) must close the request.
    A service that measures its calls returns an :class:`LLMStream` (timing per call).
    A service whose model reasons streams :class:`ReasoningDelta` before its text; its
    ``thoughts_in_context`` attribute (False if absent) says whether the thought is kept
    in the context (the reference's ``append_to_context``)."""

    @property
    def supports_tools(self) -> bool: ...

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> ClosableStream[LLMChunk]: ...


class FixedText:
    """An LLM stand-in that "answers" a given text: how the bot speaks a greeting."""

    supports_tools = False
    model = "fixed-text"

    def __init__(self, text: str) -> None:
        self.text = text

    async def stream(
        self, messages: list[dict[str, Any]], tools: Any = None, tool_choice: Any = None
    ) -> AsyncGenerator[LLMChunk, None]:
        yield TextDelta(self.text)


@runtime_checkable
class SpeakingLLM(Protocol):
    """An LLM that answers in speech (:class:`AudioDelta`), with no TTS after it: a
    speech-to-speech model. Its streams' audio is written straight to the output."""

    speaks: bool

    def heard(self, stream: object, seconds: float) -> None:
        """``stream``'s answer was cut after the user heard ``seconds`` of its audio."""
        ...

    def fixed(self, text: str) -> LLMService:
        """A stand-in that speaks ``text`` in this model's voice (a greeting)."""
        ...


def speaks(llm: object) -> bool:
    """Whether ``llm`` answers in speech itself."""
    return bool(getattr(llm, "speaks", False))
