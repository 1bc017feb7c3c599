"""The stream a service returns: an async iterator the caller can close early."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Protocol, TypeVar

T_co = TypeVar("T_co", covariant=True)


class ClosableStream(Protocol[T_co]):
    """An async iterator with ``aclose``: an async generator, or an
    :class:`~pipeline.services.llm.LLMStream`. Callers close it with
    ``contextlib.aclosing``, so that a barge-in stops the request at once."""

    def __aiter__(self) -> AsyncIterator[T_co]: ...

    def __anext__(self) -> Awaitable[T_co]: ...

    def aclose(self) -> Awaitable[None]: ...
