"""A circuit breaker per model endpoint, shared by every session that uses it.

When a provider is down, each session's next turn would otherwise wait out its own
timeout and retries, and every waiting turn holds a connection. After ``threshold``
failures in a row the breaker *opens*: for ``cooldown`` seconds calls fail at once with
:class:`ServiceUnavailableError` ("retrying in N s"). Then it is *half-open*: one call
(the probe) goes through while the others still fail at once; the probe's success
closes the breaker, its failure opens it for another cooldown. A probe that ends with
neither (a barge-in cancels it) lets the next call probe instead.

One *call* is one outcome, however many attempts it makes: a transcription that fails
after two retries is one failure, not three (else one bad call would count for most of
the threshold), and one that succeeds on a retry is a success. Usage, around one call::

    breaker.check()            # raises ServiceUnavailableError when open
    try:
        ...request...
        ...breaker.check_retry()  # before each retry: refused if it opened meanwhile
        ...request again...
    except ServiceError:
        breaker.failed(); raise
    except BaseException:
        breaker.abandoned(); raise
    breaker.succeeded()
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from pipeline.services.errors import ServiceAuthError, ServiceError, service_name


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class ServiceUnavailableError(ServiceError):
    """The endpoint's breaker is open: the call was not sent."""

    def __init__(self, service: str, retry_in: float, failures: int) -> None:
        seconds = max(1, math.ceil(retry_in))
        when = f"retrying in {seconds} s" if retry_in > 0 else "a retry is under way"
        super().__init__(
            service,
            f"{service_name(service)} is unavailable after {failures} failures in a row; {when}.",
        )
        self.retry_in = retry_in


class CircuitBreaker:
    """Counts consecutive failures of one endpoint; see the module docstring.

    ``threshold`` 0 turns the breaker off (it never opens). Not thread-safe: it lives
    on the event loop, like the sessions that share it.
    """

    def __init__(
        self,
        service: str,
        threshold: int = 5,
        cooldown: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if threshold < 0 or cooldown <= 0:
            raise ValueError("threshold must be >= 0 and cooldown > 0")
        self.service = service
        self.threshold = threshold
        self.cooldown = cooldown
        self._clock = clock
        self._state = CircuitState.CLOSED
        self._failures = 0  # consecutive
        self._opened_at = 0.0
        self._probing = False  # the half-open probe is under way
        self.times_opened = 0
        self.last_error = ""
        self.refused_key: str | None = None  # the vendor's reason, while it refuses the key

    @property
    def state(self) -> CircuitState:
        if self._state is CircuitState.OPEN and self.retry_in() <= 0:
            self._state = CircuitState.HALF_OPEN
        return self._state

    def retry_in(self) -> float:
        """Seconds until the breaker lets a probe through (0 when not open)."""
        if self._state is not CircuitState.OPEN:
            return 0.0
        return max(0.0, self._opened_at + self.cooldown - self._clock())

    def check(self) -> None:
        """Before a call: raise :class:`ServiceUnavailableError` unless it may go."""
        state = self.state
        if state is CircuitState.CLOSED:
            return
        if state is CircuitState.HALF_OPEN and not self._probing:
            self._probing = True
            return
        raise ServiceUnavailableError(self.service, self.retry_in(), self._failures)

    def check_retry(self) -> None:
        """Before a retry within a call that passed :meth:`check`: raise
        :class:`ServiceUnavailableError` if other calls' failures opened the breaker
        since. A half-open breaker lets the retry go: this call may be its probe."""
        if self.state is CircuitState.OPEN:
            raise ServiceUnavailableError(self.service, self.retry_in(), self._failures)

    def succeeded(self) -> None:
        self.refused_key = None
        self._failures = 0
        self._probing = False
        self._state = CircuitState.CLOSED

    def failed(self, error: BaseException | None = None) -> None:
        """A call failed. A :class:`ServiceUnavailableError` (our own refusal) is not
        the endpoint's failure and is ignored."""
        if isinstance(error, ServiceUnavailableError):
            return
        self._failures += 1
        if error is not None:
            self.last_error = str(error)
        if isinstance(error, ServiceAuthError):  # until a call succeeds: for /ready
            self.refused_key = str(error)
        probe_failed = self._probing
        self._probing = False
        if self.threshold and (probe_failed or self._failures >= self.threshold):
            self._state = CircuitState.OPEN
            self._opened_at = self._clock()
            self.times_opened += 1

    def abandoned(self) -> None:
        """The call ended with neither success nor failure (cancelled)."""
        self._probing = False

    def status(self) -> dict[str, Any]:
        """What /health reports."""
        return {
            "state": self.state.value,
            "consecutive_failures": self._failures,
            "retry_in_seconds": round(self.retry_in(), 3),
            "times_opened": self.times_opened,
            "threshold": self.threshold,
            "cooldown_seconds": self.cooldown,
            "last_error": self.last_error,
        }
