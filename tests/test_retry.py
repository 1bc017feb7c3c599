"""The retry policy: which errors are tried again, how often, how soon, until when."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from loguru import logger

from pipeline.services.errors import (
    ServiceAuthError,
    ServiceBadResponseError,
    ServiceHTTPError,
    from_status,
)
from pipeline.services.retry import RetryPolicy


class Flaky:
    """An attempt that fails with ``errors`` in turn, then returns ``"ok"``."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


@pytest.fixture
def retry_lines() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="DEBUG")
    yield lines
    logger.remove(sink)


async def test_a_retryable_error_is_tried_again_until_it_succeeds() -> None:
    attempt = Flaky(from_status("stt", 503), from_status("stt", 500))
    assert await RetryPolicy(retries=2, base_delay=0).call(attempt, "stt") == "ok"
    assert attempt.calls == 3


async def test_the_last_error_is_raised_after_the_retries() -> None:
    attempt = Flaky(*(from_status("stt", 503) for _ in range(5)))
    with pytest.raises(ServiceHTTPError, match="HTTP 503"):
        await RetryPolicy(retries=2, base_delay=0).call(attempt, "stt")
    assert attempt.calls == 3


async def test_a_non_retryable_error_is_raised_at_once() -> None:
    attempt = Flaky(from_status("stt", 401))
    with pytest.raises(ServiceAuthError):
        await RetryPolicy(retries=5, base_delay=0).call(attempt, "stt")
    assert attempt.calls == 1


async def test_an_unknown_failure_comes_out_as_a_service_error_not_retried() -> None:
    attempt = Flaky(RuntimeError("boom"))
    with pytest.raises(ServiceBadResponseError, match="unexpected RuntimeError") as caught:
        await RetryPolicy(retries=5, base_delay=0).call(attempt, "tts")
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert attempt.calls == 1


async def test_waits_double_from_the_base_delay(retry_lines: list[str]) -> None:
    attempt = Flaky(*(from_status("stt", 503) for _ in range(3)))
    assert await RetryPolicy(retries=3, base_delay=0.01).call(attempt, "stt") == "ok"
    waits = [line.rsplit("retrying in ", 1)[1] for line in retry_lines if "retrying in" in line]
    assert waits == ["0.01 s", "0.02 s", "0.04 s"]


async def test_no_retry_starts_whose_wait_ends_past_the_deadline() -> None:
    attempt = Flaky(from_status("tts", 503))
    policy = RetryPolicy(retries=2, base_delay=30, deadline=1)
    async with asyncio.timeout(10):  # a 30 s wait would fail here
        with pytest.raises(ServiceHTTPError):
            await policy.call(attempt, "tts")
    assert attempt.calls == 1


async def test_before_retry_runs_before_each_retry_and_may_refuse_it() -> None:
    admitted: list[int] = []
    attempt = Flaky(*(from_status("stt", 503) for _ in range(5)))

    def before_retry() -> None:
        admitted.append(attempt.calls)
        if len(admitted) == 2:
            raise ServiceAuthError("stt", "refused")

    with pytest.raises(ServiceAuthError, match="refused"):
        await RetryPolicy(retries=5, base_delay=0).call(attempt, "stt", before_retry=before_retry)
    assert admitted == [1, 2]  # never before the first attempt; none after the refusal
    assert attempt.calls == 2


async def test_cancelling_during_a_wait_sends_no_more_attempts() -> None:
    attempt = Flaky(*(from_status("stt", 503) for _ in range(5)))
    call = asyncio.create_task(RetryPolicy(retries=5, base_delay=30).call(attempt, "stt"))
    while attempt.calls == 0:
        await asyncio.sleep(0)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert attempt.calls == 1


def test_negative_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(retries=-1)
