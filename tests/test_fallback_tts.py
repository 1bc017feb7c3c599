"""FallbackTTS: a voice that fails before a sentence's audio hands the sentence to the next
(resampled to the first voice's rate); one that fails after its audio does not. Two fake
Cartesia sockets on 127.0.0.1 stand in for the vendors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import aclosing

import pytest

from pipeline.services.cartesia_tts import CartesiaTTS
from pipeline.services.circuit import CircuitBreaker, CircuitState
from pipeline.services.errors import ServiceError
from pipeline.services.fallback_tts import FallbackTTS
from pipeline.services.live_tts import SpokenText
from testkit.cartesia_stub import CartesiaStub, spoken_samples


@pytest.fixture
def first() -> Iterator[CartesiaStub]:
    with CartesiaStub() as stub:
        yield stub


@pytest.fixture
def second() -> Iterator[CartesiaStub]:
    with CartesiaStub() as stub:
        yield stub


def chain(first: CartesiaStub, second: CartesiaStub, **kwargs: object) -> FallbackTTS:
    primary = CartesiaTTS(first.api_key, base_url=first.url, **kwargs)  # type: ignore[arg-type]
    backup = CartesiaTTS(second.api_key, base_url=second.url, sample_rate=16000)
    return FallbackTTS([primary, backup], ["cartesia", "backup"])


async def samples(context: object, text: str) -> int:
    total = 0
    async with aclosing(context.say(SpokenText(text))) as audio:  # type: ignore[attr-defined]
        async for pcm in audio:
            total += len(pcm)
    return total


async def test_a_refused_voice_hands_the_sentence_to_the_next_at_its_own_rate(
    first: CartesiaStub, second: CartesiaStub
) -> None:
    first.refuse_key()
    tts = chain(first, second)
    connection = tts.open_live()
    try:
        context = connection.context()
        got = await samples(context, "Still spoken.")
        context.close()
    finally:
        await connection.aclose()
    # The backup speaks at 16 kHz; the output gets it at the first voice's 24 kHz.
    assert abs(got - spoken_samples("Still spoken.", 24000)) <= 48
    assert tts.serving == "backup" and tts.answered == 1
    assert len(second.sessions) == 1


async def test_an_open_breaker_sends_the_sentence_on_at_once(
    first: CartesiaStub, second: CartesiaStub
) -> None:
    first.refuse_key()
    breaker = CircuitBreaker("tts", threshold=1, cooldown=60)
    tts = chain(first, second, breaker=breaker)
    connection = tts.open_live()
    try:
        await samples(connection.context(), "One.")
        assert breaker.state is CircuitState.OPEN
        handshakes = len(first.sessions)
        started = time.monotonic()
        await samples(connection.context(), "Two.")
        assert time.monotonic() - started < 0.5
        assert len(first.sessions) == handshakes, "the open breaker refused without a try"
    finally:
        await connection.aclose()
    assert tts.answered == 2


async def test_a_voice_that_fails_after_its_audio_is_not_repeated(
    first: CartesiaStub, second: CartesiaStub
) -> None:
    first.drop_after(1)
    tts = chain(first, second)
    connection = tts.open_live()
    try:
        with pytest.raises(ServiceError):
            await samples(connection.context(), "A sentence long enough to be cut in two.")
    finally:
        await connection.aclose()
    assert second.sessions == [] and tts.answered == 0


async def test_the_first_voice_serves_while_it_works(
    first: CartesiaStub, second: CartesiaStub
) -> None:
    tts = chain(first, second)
    chunks = [pcm async for pcm in tts.synthesize("Fine.")]
    assert sum(len(c) for c in chunks) == spoken_samples("Fine.", 24000)
    assert tts.serving == "cartesia" and tts.answered == 0 and second.sessions == []


async def test_a_voice_that_failed_a_call_is_not_asked_again_soon(
    first: CartesiaStub, second: CartesiaStub
) -> None:
    first.refuse_key()
    tts = chain(first, second)
    connection = tts.open_live()
    try:
        context = connection.context()
        await samples(context, "One.")
        tried = first.handshakes
        await samples(context, "Two.")
        assert first.handshakes == tried, "the second sentence went to the fallback at once"
        await samples(connection.context(), "The call's next answer skips it too.")
        assert first.handshakes == tried
    finally:
        await connection.aclose()


async def test_a_voice_whose_first_connect_failed_is_not_waited_for(
    first: CartesiaStub, second: CartesiaStub
) -> None:
    first.refuse_key()
    tts = chain(first, second)
    connection = tts.open_live()
    try:
        await asyncio.sleep(0.2)  # the call's own connect, at its start, is refused
        tried = first.handshakes
        assert tried == 1
        await samples(connection.context(), "Straight to the next voice.")
        assert first.handshakes == tried and tts.serving == "backup"
    finally:
        await connection.aclose()


async def test_a_voice_that_comes_back_is_found_by_the_background_probe(
    first: CartesiaStub, second: CartesiaStub
) -> None:
    first.refuse_key()
    tts = chain(first, second)
    connection = tts.open_live()
    try:
        await asyncio.sleep(0.2)
        await samples(connection.context(), "The backup speaks.")
        assert tts.serving == "backup"
        first.refused = False  # the vendor is back
        connection.probe_at = 0.0  # the next probe is due
        await samples(connection.context(), "Still the backup: the probe runs meanwhile.")
        await asyncio.sleep(0.2)
        connection.skip_until = 0.0
        await samples(connection.context(), "The first voice again.")
        assert tts.serving == "cartesia"
    finally:
        await connection.aclose()
