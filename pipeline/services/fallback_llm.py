"""LLM fallbacks (``PARLEY_LLM_FALLBACK``): the next LLM answers when one fails before
its answer begins.

A failure is any :class:`~pipeline.services.errors.ServiceError` before the stream's
first content (text, reasoning or a tool call): no connection, a refused key, no first
token in time, a 5xx, the breaker open (which refuses at once, so an LLM known to be
down costs no wait). The next LLM gets the same messages: the user's words are in
them, nothing is lost. Once content has come, a failure is the turn's, as without a
fallback (its words may already be spoken). A tool is offered only to an LLM that
calls tools. :attr:`FallbackLLM.serving` names who answered last, for ``/health``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Any

from loguru import logger

from pipeline.services.errors import ServiceError
from pipeline.services.llm import LLMChunk, LLMService, LLMStream, UsageReport


class FallbackLLM:
    """Tries ``services`` in order (named by ``names``) for each answer."""

    def __init__(self, services: Sequence[LLMService], names: Sequence[str]) -> None:
        if len(services) < 2 or len(services) != len(names):
            raise ValueError("one name per service, and at least two services")
        self.services = list(services)
        self.names = list(names)
        first = services[0]
        self.model = str(getattr(first, "model", "") or "")
        self.thoughts_in_context = bool(getattr(first, "thoughts_in_context", False))
        self.serving = self.names[0]
        self.answered = 0  # answers the fallbacks gave

    @property
    def supports_tools(self) -> bool:
        return self.services[0].supports_tools

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> LLMStream:
        return LLMStream(lambda stream: self._answer(stream, messages, tools, tool_choice))

    async def _answer(
        self,
        outer: LLMStream,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: Any,
    ) -> AsyncGenerator[LLMChunk, None]:
        last = len(self.services) - 1
        for index, service in enumerate(self.services):
            offered = tools if service.supports_tools else None
            inner = service.stream(messages, offered, tool_choice if offered else None)
            began = False
            try:
                async with aclosing(inner) as chunks:
                    async for chunk in chunks:
                        if not began and not isinstance(chunk, UsageReport):
                            began = True
                            outer.first_token()
                            self._served(index)
                        yield chunk
                outer.finish_reason = getattr(inner, "finish_reason", None)
                return
            except ServiceError as exc:
                if began or index == last:
                    raise
                logger.warning("LLM {} failed ({}); {} answers", self.names[index], exc,
                               self.names[index + 1])  # fmt: skip

    def _served(self, index: int) -> None:
        self.serving = self.names[index]
        self.answered += index > 0
