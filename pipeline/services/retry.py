"""The retry policy of the model services: how often, how soon, and until when.

STT sends a failed request again, TTS a sentence whose audio has not started; the LLM
never retries (its text may already have been spoken). A request is sent again only when
its error is ``retryable`` (see :mod:`pipeline.services.errors`: connection problems,
timeouts, 429 and 5xx), after 0.2 s, 0.4 s, 0.8 s...: short on purpose, a user is waiting,
and a 429 gets the same short wait rather than its ``Retry-After``, which is usually
longer than a voice turn can wait. With a ``deadline`` no retry starts whose wait would
end past it (counted from the first attempt).

The loop is `tenacity`'s (``AsyncRetrying``): its stop conditions (attempts, time before
the next attempt), exponential wait and re-raising are what this needs, tested by many,
so only the policy is written here. Not ``stamina`` (built on tenacity): its jitter and
its retry metrics, which it adds to any ``prometheus_client`` registry it finds, would
have to be turned off, and its timeout cannot say "no retry whose wait ends past the
deadline". An ``AsyncRetrying`` keeps per-run state, so each call makes its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from loguru import logger
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential,
)
from tenacity.stop import stop_base

from pipeline.services.errors import ServiceError, map_error

T = TypeVar("T")


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, ServiceError) and exc.retryable


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``retries`` after the first attempt, waiting ``base_delay``, twice that, ...;
    none started past ``deadline`` seconds (None: no limit) from the first attempt."""

    retries: int = 2
    base_delay: float = 0.2
    deadline: float | None = None

    def __post_init__(self) -> None:
        if self.retries < 0 or self.base_delay < 0:
            raise ValueError("retries and base_delay must be >= 0")

    async def call(
        self,
        attempt: Callable[[], Awaitable[T]],
        service: str,
        *,
        before_retry: Callable[[], None] | None = None,
    ) -> T:
        """``await attempt()``, again while its error is retryable and the policy allows.

        Failures come out as :class:`ServiceError` (mapped by :func:`map_error`, which
        logs what the endpoint said); the last one is raised. ``before_retry`` runs
        before each retry, after the wait, and may raise to stop (an open circuit
        breaker refuses it)."""

        async def mapped() -> T:
            try:
                return await attempt()
            except Exception as exc:
                error = map_error(exc, service)
                if error is exc:
                    raise
                raise error from exc

        def before(state: RetryCallState) -> None:
            if state.attempt_number > 1 and before_retry is not None:
                before_retry()

        def log_retry(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            logger.debug(
                "{}: attempt {} failed ({}); retrying in {:g} s",
                service,
                state.attempt_number,
                error,
                state.upcoming_sleep,
            )

        stop: stop_base = stop_after_attempt(self.retries + 1)
        if self.deadline is not None:
            stop = stop | stop_before_delay(self.deadline)
        retrying = AsyncRetrying(
            stop=stop,
            wait=wait_exponential(multiplier=self.base_delay),
            retry=retry_if_exception(_retryable),
            before=before,
            before_sleep=log_retry,
            reraise=True,
        )
        return await retrying(mapped)
