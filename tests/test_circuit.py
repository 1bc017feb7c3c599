"""The circuit breaker: a state machine on a fake clock, then around real requests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from pipeline.services.circuit import CircuitBreaker, CircuitState, ServiceUnavailableError
from pipeline.services.errors import (
    ServiceAuthError,
    ServiceBadResponseError,
    ServiceHTTPError,
    unreachable,
)
from pipeline.services.openai_llm import OpenAILLM
from pipeline.services.openai_stt import OpenAISTT
from pipeline.services.openai_tts import OpenAITTS
from pipeline.services.retry import RetryPolicy
from testkit.openai_stub import Fault, OpenAIStub, openai_stub_fixture  # noqa: F401

CHAT = "/v1/chat/completions"
STT = "/v1/audio/transcriptions"
TTS = "/v1/audio/speech"
USER = [{"role": "user", "content": "Hello?"}]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def failing(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        breaker.check()
        breaker.failed(unreachable(breaker.service))


def test_opens_after_threshold_failures_in_a_row(clock: Clock) -> None:
    breaker = CircuitBreaker("llm", threshold=3, cooldown=10, clock=clock)
    failing(breaker, 2)
    breaker.check()
    breaker.succeeded()  # a success resets the count
    failing(breaker, 2)
    assert breaker.state is CircuitState.CLOSED
    failing(breaker, 1)
    assert breaker.state is CircuitState.OPEN
    clock.now += 4
    with pytest.raises(ServiceUnavailableError, match="retrying in 6 s") as refused:
        breaker.check()
    assert "The LLM service is unavailable after 3 failures in a row" in str(refused.value)
    assert not refused.value.retryable
    status = breaker.status()
    assert status["state"] == "open" and status["retry_in_seconds"] == pytest.approx(6)
    assert status["times_opened"] == 1 and "could not be reached" in status["last_error"]


def test_half_open_lets_one_probe_through_and_its_success_closes(clock: Clock) -> None:
    breaker = CircuitBreaker("tts", threshold=2, cooldown=5, clock=clock)
    failing(breaker, 2)
    clock.now += 5
    assert breaker.state is CircuitState.HALF_OPEN
    breaker.check()  # the probe
    with pytest.raises(ServiceUnavailableError, match="a retry is under way"):
        breaker.check()  # everyone else waits for its outcome
    breaker.succeeded()
    assert breaker.state is CircuitState.CLOSED
    breaker.check()
    assert breaker.status()["consecutive_failures"] == 0


def test_a_failed_probe_opens_for_another_cooldown(clock: Clock) -> None:
    breaker = CircuitBreaker("stt", threshold=2, cooldown=5, clock=clock)
    failing(breaker, 2)
    clock.now += 5
    breaker.check()
    breaker.failed(ServiceHTTPError("stt", "HTTP 500", retryable=True))
    assert breaker.state is CircuitState.OPEN
    assert breaker.retry_in() == pytest.approx(5)
    assert breaker.times_opened == 2


def test_an_abandoned_probe_lets_the_next_call_probe(clock: Clock) -> None:
    breaker = CircuitBreaker("llm", threshold=1, cooldown=1, clock=clock)
    failing(breaker, 1)
    clock.now += 1
    breaker.check()
    breaker.abandoned()  # cancelled by a barge-in: neither outcome
    breaker.check()
    assert breaker.state is CircuitState.HALF_OPEN


def test_its_own_refusals_do_not_count_and_zero_means_off(clock: Clock) -> None:
    breaker = CircuitBreaker("llm", threshold=1, cooldown=1, clock=clock)
    failing(breaker, 1)
    breaker.failed(ServiceUnavailableError("llm", 1, 1))
    assert breaker.status()["consecutive_failures"] == 1
    off = CircuitBreaker("llm", threshold=0, cooldown=1, clock=clock)
    failing(off, 50)
    assert off.state is CircuitState.CLOSED
    with pytest.raises(ValueError):
        CircuitBreaker("llm", threshold=-1)


# -- around real requests to the stub ------------------------------------------------------


@pytest.fixture
def breaker(clock: Clock) -> Iterator[CircuitBreaker]:
    yield CircuitBreaker("llm", threshold=2, cooldown=30, clock=clock)


async def answer(llm: OpenAILLM) -> str:
    return "".join([getattr(c, "text", "") async for c in llm.stream(USER)])


async def test_an_open_llm_breaker_sends_nothing_until_the_cooldown_ends(
    openai_stub: OpenAIStub, breaker: CircuitBreaker, clock: Clock
) -> None:
    llm = OpenAILLM("m", base_url=openai_stub.base_url, api_key="sk-stub", breaker=breaker)
    openai_stub.script_chat(Fault.http(500), Fault.malformed(after=1))
    with pytest.raises(ServiceHTTPError):
        await answer(llm)
    with pytest.raises(ServiceBadResponseError):
        await answer(llm)
    assert breaker.state is CircuitState.OPEN
    for _ in range(5):
        with pytest.raises(ServiceUnavailableError):
            await answer(llm)
    assert len(openai_stub.requests(CHAT)) == 2, "nothing was sent while open"
    clock.now += 30
    assert await answer(llm) == openai_stub.config.default_text  # the probe
    assert breaker.state is CircuitState.CLOSED
    await llm.aclose()


async def test_a_closed_stream_is_neither_success_nor_failure(
    openai_stub: OpenAIStub, breaker: CircuitBreaker, clock: Clock
) -> None:
    llm = OpenAILLM("m", base_url=openai_stub.base_url, api_key="sk-stub", breaker=breaker)
    failing(breaker, 2)
    clock.now += 30
    stream = llm.stream(USER)
    await anext(stream)
    await stream.aclose()  # barge-in during the probe
    assert breaker.state is CircuitState.HALF_OPEN
    assert await answer(llm)
    assert breaker.state is CircuitState.CLOSED
    await llm.aclose()


async def test_tts_failures_open_its_breaker(openai_stub: OpenAIStub, clock: Clock) -> None:
    breaker = CircuitBreaker("tts", threshold=1, cooldown=30, clock=clock)
    tts = OpenAITTS("m", "alloy", base_url=openai_stub.base_url, api_key="sk-stub",
                    retry=RetryPolicy(retries=0), breaker=breaker)  # fmt: skip
    openai_stub.script_tts(Fault.malformed(after=0))
    with pytest.raises(Exception, match="not audio"):
        [c async for c in tts.synthesize("Hello.")]
    with pytest.raises(ServiceUnavailableError):
        [c async for c in tts.synthesize("Hello.")]
    clock.now += 30
    assert sum(c.size for c in [c async for c in tts.synthesize("Hello.")]) > 0
    assert breaker.state is CircuitState.CLOSED
    await tts.aclose()


# -- one call, however many attempts, is one outcome -----------------------------------------


def stt_at(openai_stub: OpenAIStub, breaker: CircuitBreaker, **kwargs: Any) -> OpenAISTT:
    kwargs.setdefault("retry", RetryPolicy(retries=2, base_delay=0.01))
    return OpenAISTT("m", base_url=openai_stub.base_url, api_key="sk-stub", breaker=breaker,
                     **kwargs)  # fmt: skip


async def test_a_transcription_that_failed_after_its_retries_is_one_failure(
    openai_stub: OpenAIStub, clock: Clock
) -> None:
    breaker = CircuitBreaker("stt", threshold=2, cooldown=30, clock=clock)
    stt = stt_at(openai_stub, breaker)
    openai_stub.fail_times("stt", 3, Fault.http(503))
    with pytest.raises(ServiceHTTPError, match="HTTP 503"):
        await stt.transcribe(np.zeros(3200, np.int16))
    assert len(openai_stub.requests(STT)) == 3  # it did retry, twice
    assert breaker.status()["consecutive_failures"] == 1
    assert breaker.state is CircuitState.CLOSED
    openai_stub.fail_times("stt", 3, Fault.http(503))
    with pytest.raises(ServiceHTTPError):
        await stt.transcribe(np.zeros(3200, np.int16))
    assert breaker.state is CircuitState.OPEN  # the second failed call, not the 2nd attempt
    await stt.aclose()


async def test_a_sentence_that_failed_after_its_retries_is_one_tts_failure(
    openai_stub: OpenAIStub, clock: Clock
) -> None:
    breaker = CircuitBreaker("tts", threshold=2, cooldown=30, clock=clock)
    tts = OpenAITTS("m", "alloy", base_url=openai_stub.base_url, api_key="sk-stub",
                    retry=RetryPolicy(retries=2, base_delay=0.01), breaker=breaker)  # fmt: skip
    openai_stub.fail_times("tts", 3, Fault.http(503))
    with pytest.raises(ServiceHTTPError, match="HTTP 503"):
        [c async for c in tts.synthesize("Hello.")]
    assert len(openai_stub.requests(TTS)) == 3  # it did retry, twice
    assert breaker.status()["consecutive_failures"] == 1
    openai_stub.fail_times("tts", 2, Fault.http(503))
    assert sum(c.size for c in [c async for c in tts.synthesize("Hello.")]) > 0
    assert breaker.status()["consecutive_failures"] == 0  # succeeded on its 3rd attempt
    await tts.aclose()


async def test_a_transcription_that_succeeds_on_a_retry_is_a_success(
    openai_stub: OpenAIStub, clock: Clock
) -> None:
    breaker = CircuitBreaker("stt", threshold=2, cooldown=30, clock=clock)
    failing(breaker, 1)
    stt = stt_at(openai_stub, breaker)
    openai_stub.fail_times("stt", 2, Fault.http(503))
    assert (await stt.transcribe(np.zeros(3200, np.int16))).text == "hello world"
    assert breaker.status()["consecutive_failures"] == 0
    await stt.aclose()


async def test_a_probe_may_retry_and_its_outcome_counts_once(
    openai_stub: OpenAIStub, clock: Clock
) -> None:
    breaker = CircuitBreaker("stt", threshold=1, cooldown=30, clock=clock)
    failing(breaker, 1)
    clock.now += 30
    stt = stt_at(openai_stub, breaker)
    openai_stub.fail_times("stt", 1, Fault.http(503))
    assert (await stt.transcribe(np.zeros(3200, np.int16))).text == "hello world"
    assert breaker.state is CircuitState.CLOSED
    assert len(openai_stub.requests(STT)) == 2
    await stt.aclose()


async def test_stt_retries_stop_when_other_calls_open_the_breaker(
    openai_stub: OpenAIStub, clock: Clock
) -> None:
    breaker = CircuitBreaker("stt", threshold=2, cooldown=30, clock=clock)
    stt = stt_at(openai_stub, breaker, retry=RetryPolicy(retries=5, base_delay=0.3))
    openai_stub.fail_times("stt", 6, Fault.http(503))
    call = asyncio.create_task(stt.transcribe(np.zeros(3200, np.int16)))
    assert await openai_stub.wait_for(lambda: len(openai_stub.requests(STT)) == 1)
    failing(breaker, 2)  # other sessions' calls fail meanwhile: the breaker opens
    with pytest.raises(ServiceUnavailableError, match="retrying in 30 s"):
        await call
    assert len(openai_stub.requests(STT)) == 1, "no retry was sent once it opened"
    assert breaker.status()["consecutive_failures"] == 2
    await stt.aclose()


def test_a_refused_key_is_remembered_until_a_call_succeeds() -> None:
    breaker = CircuitBreaker("tts", threshold=0)
    breaker.failed(ServiceAuthError("tts", "The key was refused. Check CARTESIA_API_KEY."))
    breaker.failed(unreachable("tts"))  # a later failure of another kind keeps it
    assert breaker.refused_key is not None and "CARTESIA_API_KEY" in breaker.refused_key
    breaker.succeeded()
    assert breaker.refused_key is None
