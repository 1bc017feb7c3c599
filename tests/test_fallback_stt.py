"""STT fallbacks (pipeline/services/fallback_stt.py, pipeline/hearing/recognition.py,
server/session/speech_services.py): a failing STT hands the utterance's own audio to the
next, a breaker that opened skips it at once, and /health says which one serves."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import numpy as np
import pytest
from pydantic import ValidationError

from pipeline.hearing.recognition import Recognition
from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import ServiceError
from pipeline.services.fallback_stt import FallbackSTT
from pipeline.services.openai_stt import OpenAISTT
from pipeline.services.retry import RetryPolicy
from server.session.speech_services import build_stt, stt_serving
from server.settings import Settings
from testkit.openai_stub import Fault, OpenAIStub

SPEECH = np.zeros(16000, np.int16)
NOWHERE = "http://127.0.0.1:9/v1"  # the discard port: nothing listens


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as running:
        running.config.transcript = "from the fallback"
        yield running


MADE: list[OpenAISTT] = []


@pytest.fixture(autouse=True)
async def closed() -> AsyncIterator[None]:
    yield
    while MADE:
        await MADE.pop().aclose()


def openai_stt(url: str, key: str = "k", breaker: CircuitBreaker | None = None) -> OpenAISTT:
    stt = OpenAISTT("whisper-1", base_url=url, api_key=key, timeout=2.0,
                    retry=RetryPolicy(retries=0), breaker=breaker)  # fmt: skip
    MADE.append(stt)
    return stt


async def test_the_next_stt_transcribes_the_utterance_the_first_failed_on(
    stub: OpenAIStub,
) -> None:
    chain = FallbackSTT([openai_stt(NOWHERE), openai_stt(stub.base_url, stub.api_key)],
                        ["openai", "backup"])  # fmt: skip
    transcript = await chain.transcribe(SPEECH)
    assert transcript.text == "from the fallback"
    assert chain.serving == "backup" and chain.answered == 1
    assert len(stub.requests("/v1/audio/transcriptions")) == 1


async def test_the_last_stts_failure_is_raised(stub: OpenAIStub) -> None:
    stub.fail_times("stt", 1, Fault.http(500))
    chain = FallbackSTT([openai_stt(NOWHERE), openai_stt(stub.base_url, stub.api_key)],
                        ["a", "b"])  # fmt: skip
    with pytest.raises(ServiceError):
        await chain.transcribe(SPEECH)


async def test_recognition_sends_the_same_audio_to_the_fallback(stub: OpenAIStub) -> None:
    stub.fail_times("stt", 1, Fault.http(503))
    primary = openai_stt(stub.base_url, stub.api_key)
    recognition = Recognition(primary, openai_stt(stub.base_url, stub.api_key))
    assert (await recognition.transcribe(SPEECH, 16000)).text == "from the fallback"
    bodies = [r.body["file"] for r in stub.requests("/v1/audio/transcriptions")]
    assert len(bodies) == 2 and bodies[0] == bodies[1], "both heard the whole utterance"
    assert recognition.fallbacks == 1


async def test_an_open_breaker_skips_its_stt_without_waiting(stub: OpenAIStub) -> None:
    breaker = CircuitBreaker("stt", 1, 30.0)
    primary = openai_stt(NOWHERE, breaker=breaker)
    chain = FallbackSTT([openai_stt(stub.base_url, stub.api_key)], ["local"], after="openai")
    recognition = Recognition(primary, chain)
    await recognition.transcribe(SPEECH, 16000)  # the failure that opens it
    assert stt_serving(primary, chain)["serving"] == "local"
    started = time.perf_counter()
    assert (await recognition.transcribe(SPEECH, 16000)).text == "from the fallback"
    assert time.perf_counter() - started < 0.5
    assert stt_serving(primary, chain) == {
        "order": ["openai", "local"], "serving": "local", "fallback_utterances": 2,
    }  # fmt: skip


def test_fallbacks_are_built_in_order_behind_the_stt(stub: OpenAIStub) -> None:
    settings = Settings(stt="openai", stt_fallback=["openai", "deepgram"], deepgram_api_key="d",
                        openai_base_url=stub.base_url, openai_api_key="k")  # fmt: skip
    stt, chain = build_stt(settings, None, lambda s, name: CircuitBreaker(name, 3, 1.0))
    assert isinstance(stt, OpenAISTT)
    assert chain is not None and chain.names == ["deepgram"], "a repeat of the STT is dropped"
    assert type(chain.services[0]).__name__ == "DeepgramSTT"


def test_a_fallback_vendor_without_its_key_stops_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DEEPGRAM_API_KEY", raising=False)
    monkeypatch.setenv("PARLEY_STT_FALLBACK", '["deepgram", "local"]')
    with pytest.raises(ValidationError, match="PARLEY_STT_FALLBACK=deepgram needs an API key: "
                       "set DEEPGRAM_API_KEY"):  # fmt: skip
        Settings(stt="openai")
    monkeypatch.setenv("DEEPGRAM_API_KEY", "k")
    assert Settings(stt="openai").stt_fallback == ["deepgram", "local"]
