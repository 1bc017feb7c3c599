"""CartesiaTTS against the fake TTS WebSocket on 127.0.0.1 (testkit/cartesia_stub.py); the
official SDK's own websocket client driving the same fake is what shows it faithful."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing
from typing import Any

import numpy as np
import pytest

from pipeline.services.cartesia_tts import CartesiaDialect, CartesiaTTS
from pipeline.services.circuit import CircuitBreaker, CircuitState
from pipeline.services.errors import ServiceAuthError, ServiceError
from pipeline.services.live_tts import SpokenText, heard_until
from pipeline.services.socket_tts import SocketTTSConnection
from pipeline.services.tts_dialect import Audio, Done, Failed, Timestamps
from testkit.cartesia_stub import CartesiaStub, spoken_samples

RATE = 24000


@pytest.fixture
def stub() -> Iterator[CartesiaStub]:
    with CartesiaStub() as server:
        yield server


@pytest.fixture
async def connect(stub: CartesiaStub) -> AsyncIterator[Callable[..., SocketTTSConnection]]:
    connections: list[SocketTTSConnection] = []

    def factory(**kwargs: Any) -> SocketTTSConnection:
        kwargs.setdefault("base_url", stub.url)
        tts = CartesiaTTS(kwargs.pop("api_key", stub.api_key), **kwargs)
        connection = tts.open_live()
        connections.append(connection)
        return connection

    yield factory
    for connection in connections:
        await connection.aclose()


async def spoken(context: Any, text: SpokenText) -> int:
    """Samples of the sentence's audio."""
    total = 0
    async with aclosing(context.say(text)) as audio:
        async for pcm in audio:
            total += len(pcm)
    return total


async def test_the_sentences_of_an_answer_share_one_socket_and_one_context(
    stub: CartesiaStub, connect: Callable[..., SocketTTSConnection]
) -> None:
    connection = connect(language="en-US")
    context = connection.context()
    first, second = SpokenText("Hello there, rider."), SpokenText("Your bike is ready.")
    assert await spoken(context, first) == spoken_samples(first, RATE)
    assert await spoken(context, second) == spoken_samples(second, RATE)
    context.close()
    await asyncio.sleep(0.05)
    [session] = stub.sessions
    assert session.headers["cartesia-version"] == "2026-08-14"
    transcripts = [r["transcript"] for r in session.requests]
    assert transcripts == ["Hello there, rider.", "", " Your bike is ready.", "", ""]
    assert {r["context_id"] for r in session.requests} == {context.id}
    assert [r["continue"] for r in session.requests] == [True, True, True, True, False]
    assert session.requests[0]["output_format"] == {
        "container": "raw", "encoding": "pcm_s16le", "sample_rate": RATE
    }  # fmt: skip
    assert session.requests[0]["language"] == "en"


async def test_word_times_are_counted_from_each_sentence_start(
    connect: Callable[..., SocketTTSConnection],
) -> None:
    context = connect().context()
    await spoken(context, SpokenText("One two."))
    second = SpokenText("Three four five.")
    await spoken(context, second)
    # The stub counts from the context's start; the sentence's own times start at 0.
    assert [round(w.start, 3) for w in second.words] == [0.0, 0.15, 0.27]
    assert [second[: w.until] for w in second.words] == ["Three", "Three four", second]
    assert heard_until(second, 0.2) == len("Three")  # "four" is not half played
    assert heard_until(second, 0.2, started=True) == len("Three four")


async def test_a_cancelled_sentence_stops_at_the_vendor_and_leaks_nothing(
    stub: CartesiaStub, connect: Callable[..., SocketTTSConnection]
) -> None:
    stub.pace = 0.02
    connection = connect()
    cut = connection.context()
    async with aclosing(cut.say(SpokenText("A rather long sentence that is cut."))) as audio:
        async for _pcm in audio:
            break  # the caller barged in
    cut.close()  # nothing more: the context is cancelled
    following = SpokenText("Next one.")
    assert await spoken(connection.context(), following) == spoken_samples(following, RATE)
    [session] = stub.sessions
    assert session.cancels == [cut.id]
    assert session.contexts[cut.id].chunks < 3
    assert all(
        r.get("continue") is not False for r in session.requests if r["context_id"] == cut.id
    )


async def test_a_socket_dropped_before_the_first_audio_is_reopened(
    stub: CartesiaStub, connect: Callable[..., SocketTTSConnection]
) -> None:
    stub.drop_after(0)
    text = SpokenText("Still heard.")
    assert await spoken(connect().context(), text) == spoken_samples(text, RATE)
    assert len(stub.sessions) == 2


async def test_a_socket_dropped_mid_sentence_fails_it_and_the_next_is_spoken(
    stub: CartesiaStub, connect: Callable[..., SocketTTSConnection]
) -> None:
    stub.drop_after(2)
    connection = connect()
    context = connection.context()
    with pytest.raises(ServiceError):
        await spoken(context, SpokenText("A sentence long enough for three chunks of audio."))
    text = SpokenText("Back again.")
    assert await spoken(connection.context(), text) == spoken_samples(text, RATE)


async def test_a_refused_key_names_its_variable_and_counts_for_the_breaker(
    stub: CartesiaStub, connect: Callable[..., SocketTTSConnection]
) -> None:
    stub.refuse_key()
    breaker = CircuitBreaker("tts", threshold=1)
    with pytest.raises(ServiceAuthError, match="CARTESIA_API_KEY"):
        await spoken(connect(breaker=breaker).context(), SpokenText("Hello."))
    assert breaker.state is CircuitState.OPEN


async def test_synthesize_speaks_one_text_on_its_own_socket(stub: CartesiaStub) -> None:
    tts = CartesiaTTS(stub.api_key, base_url=stub.url.replace("ws://", "http://"))
    chunks = [pcm async for pcm in tts.synthesize("On its own.")]
    assert sum(len(c) for c in chunks) == spoken_samples("On its own.", RATE)
    assert stub.sessions[0].query == {"cartesia_version": "2026-08-14"}


async def test_the_first_audio_waits_at_most_the_audio_timeout(
    stub: CartesiaStub, connect: Callable[..., SocketTTSConnection]
) -> None:
    stub.first_audio_delay = 1.0
    with pytest.raises(ServiceError, match=r"in time|timed out"):
        await spoken(connect(audio_timeout=0.2).context(), SpokenText("Late."))


def test_the_dialect_reads_errors_and_timestamps() -> None:
    dialect = CartesiaDialect("wss://x", "k", model="m", voice="v", sample_rate=RATE,
                              language=None)  # fmt: skip
    [failed] = dialect.read(json.dumps({"type": "error", "context_id": "c", "title": "Bad"}))
    assert isinstance(failed, Failed) and failed.context == "c"
    assert "Bad" in failed.error.detail
    [times] = dialect.read(json.dumps({"type": "timestamps", "context_id": "c",
        "word_timestamps": {"words": ["a"], "start": [0.1], "end": [0.2]}}))  # fmt: skip
    assert times == Timestamps("c", (("a", 0.1, 0.2),))
    assert dialect.read(json.dumps({"type": "flush_done", "context_id": "c"})) == [Done("c")]
    [audio] = dialect.read(json.dumps({"type": "chunk", "context_id": "c", "data": "AAA="}))
    assert audio == Audio("c", b"\x00\x00")
    assert dialect.read(b"\x00") == [] and dialect.read("not json") == []


async def test_the_official_sdk_speaks_with_the_fake(stub: CartesiaStub) -> None:
    """cartesia 4.2's AsyncCartesia: a context pushed, flushed and ended, its audio,
    timestamps, flush_done and done read back through the SDK's own models."""
    from cartesia import AsyncCartesia

    client = AsyncCartesia(api_key=stub.api_key, websocket_base_url=stub.url)
    async with client.tts.websocket_connect() as connection:
        context = connection.context(
            model_id="sonic-3",
            voice="voice",
            output_format={"container": "raw", "encoding": "pcm_s16le", "sample_rate": RATE},
            add_timestamps=True,
        )
        await context.push("Stay hungry.")
        await context.push("", flush=True)
        await context.no_more_inputs()
        kinds: list[str] = []
        audio = b""
        async for response in context.receive():
            kinds.append(response.type)
            if response.type == "chunk" and response.audio:
                audio += response.audio
    await client.close()
    assert kinds[0] == "chunk" and "timestamps" in kinds
    assert kinds[-2:] == ["flush_done", "done"]
    assert len(np.frombuffer(audio, "<i2")) == spoken_samples("Stay hungry.", RATE)
