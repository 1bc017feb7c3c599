"""DeepgramSTT against the fake listen v1 socket on 127.0.0.1
(testkit/deepgram_stub.py); the official SDK's own websocket client driving the same
fake is what shows the fake faithful."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import numpy as np
import pytest

from pipeline.services.circuit import CircuitBreaker, CircuitState
from pipeline.services.deepgram_stt import DeepgramDialect, DeepgramSTT
from pipeline.services.errors import ServiceAuthError, ServiceBadResponseError, ServiceTimeoutError
from pipeline.services.live_stt import Words
from pipeline.services.socket_stt import Failed, Flushed, SocketSTTStream, socket_url
from testkit.deepgram_stub import DeepgramStub

FRAME = 640  # 20 ms of 16 kHz s16le


@pytest.fixture
def stub() -> Iterator[DeepgramStub]:
    with DeepgramStub() as server:
        yield server


@pytest.fixture
async def make(stub: DeepgramStub) -> AsyncIterator[Callable[..., SocketSTTStream]]:
    streams: list[SocketSTTStream] = []

    def factory(on_words: Callable[[Words], None] | None = None, **kwargs: Any) -> SocketSTTStream:
        kwargs.setdefault("base_url", stub.url)
        keepalive = kwargs.pop("keepalive_seconds", None)
        stt = DeepgramSTT(kwargs.pop("api_key", stub.api_key), **kwargs)
        if keepalive is not None:
            stt.keepalive_seconds = keepalive
        stream = stt.open_live(on_words)
        streams.append(stream)
        return stream

    yield factory
    for stream in streams:
        await stream.aclose()
    await asyncio.sleep(0.05)  # sockets given up close in tasks of their own


def speak(stream: SocketSTTStream, seconds: float) -> None:
    for _ in range(int(seconds * 50)):
        stream.send(b"\x01\x00" * (FRAME // 2))


async def test_scripted_words_per_finalize(stub: DeepgramStub, make: Any) -> None:
    stub.script("what time is it")
    heard: list[Words] = []
    stream = make(heard.append)
    speak(stream, 0.6)
    transcript = await stream.finalize()
    assert transcript.text == "what time is it"
    final = [w for w in heard if w.final]
    assert len(final) == 1
    assert [w.text for w in final[0].words] == ["what", "time", "is", "it"]
    assert 0 <= final[0].words[0].start < final[0].words[-1].end <= 0.65
    assert any(not w.final for w in heard)  # an interim Results while the audio came


async def test_two_finalizes_in_order(stub: DeepgramStub, make: Any) -> None:
    stub.script("first part", "second part")
    heard: list[Words] = []
    stream = make(heard.append)
    speak(stream, 0.3)
    first = stream.finalize()
    speak(stream, 0.3)
    second = stream.finalize()
    assert (await first).text == "first part"
    assert (await second).text == "second part"
    assert stub.sessions[-1].finalizes == 2
    times = [w.start for words in heard if words.final for w in words.words]
    assert times == sorted(times) and times[-1] >= 0.3  # stream seconds across requests


async def test_a_cancelled_finalize_loses_nothing(stub: DeepgramStub, make: Any) -> None:
    stub.script("kept words", "more words")
    stub.finalize_delay = 0.2
    stream = make()
    speak(stream, 0.3)
    task = asyncio.ensure_future(stream.finalize())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.3)  # its answer arrives with nobody waiting
    speak(stream, 0.3)
    assert (await stream.finalize()).text == "kept words more words"


async def test_a_dropped_socket_is_replayed(stub: DeepgramStub, make: Any) -> None:
    stub.script("before the drop", "after the drop")
    stub.drop_after(int(0.5 * 32000))  # mid-way through the second utterance
    heard: list[Words] = []
    stream = make(heard.append)
    speak(stream, 0.3)
    assert (await stream.finalize()).text == "before the drop"
    speak(stream, 0.4)
    await asyncio.sleep(0.2)
    assert (await stream.finalize()).text == "after the drop"
    assert stream.reconnects == 1
    replay = stub.sessions[-1]
    assert replay.audio >= 0.4 * 32000 and replay.finalizes == 1  # only the unconfirmed audio
    last = [w for w in heard if w.final][-1]
    assert last.words[0].start == pytest.approx(0.3, abs=0.01)  # stream time, not socket time


async def test_keepalive_outlives_the_idle_timeout(stub: DeepgramStub, make: Any) -> None:
    stub.idle_timeout = 0.5
    stream = make(keepalive_seconds=0.3)
    speak(stream, 0.1)
    await asyncio.sleep(1.5)
    session = stub.sessions[-1]
    assert stream.connected and not session.closed and not session.idled_out
    assert {"type": "KeepAlive"} in session.messages
    assert len(stub.sessions) == 1


async def test_silence_closes_without_keepalive(stub: DeepgramStub, make: Any) -> None:
    stub.idle_timeout = 0.3
    stream = make(keepalive_seconds=0)  # none sent
    speak(stream, 0.1)
    await asyncio.sleep(0.6)
    assert stub.sessions[0].idled_out


async def test_a_refused_key_names_the_variable(stub: DeepgramStub, make: Any) -> None:
    stub.refuse_key()
    breaker = CircuitBreaker("stt", threshold=2, cooldown=60)
    stream = make(breaker=breaker)
    speak(stream, 0.1)
    with pytest.raises(ServiceAuthError) as caught:
        await stream.finalize()
    assert "DEEPGRAM_API_KEY" in str(caught.value)
    assert "DEEPGRAM_API_KEY" in breaker.last_error
    assert breaker.state is CircuitState.CLOSED  # counted once, not twice


async def test_a_wrong_key_is_refused(make: Any) -> None:
    stream = make(api_key="wrong")
    speak(stream, 0.1)
    with pytest.raises(ServiceAuthError) as caught:
        await stream.finalize()
    assert "wrong" not in str(caught.value)


async def test_finalize_timeout(stub: DeepgramStub, make: Any) -> None:
    stub.finalize_delay = 1.0
    stream = make(finalize_timeout=0.2)
    speak(stream, 0.2)
    with pytest.raises(ServiceTimeoutError):
        await stream.finalize()
    await asyncio.sleep(0.3)  # the socket given up closes in a task of its own


async def test_query_and_headers(stub: DeepgramStub, make: Any) -> None:
    stream = make(language="en-US")
    speak(stream, 0.1)
    transcript = await stream.finalize()
    assert transcript.language == "en-US"
    session = stub.sessions[-1]
    assert session.query["model"] == "nova-3"
    assert session.query["language"] == "en-US"
    assert session.query["encoding"] == "linear16"
    assert session.query["sample_rate"] == "16000"
    assert session.query["channels"] == "1"
    assert session.query["interim_results"] == "true"
    assert session.headers["authorization"] == f"Token {stub.api_key}"


def test_base_url_scheme() -> None:
    assert (
        socket_url("http://host:81/ignored", "/v1/listen", {"a": 1}) == "ws://host:81/v1/listen?a=1"
    )
    assert socket_url("https://host", "/v1/listen", {}).startswith("wss://host/v1/listen?")
    assert DeepgramSTT("k").url.startswith("wss://api.deepgram.com/v1/listen?model=nova-3")


def test_reading_deepgram_messages() -> None:
    dialect = DeepgramDialect("ws://x", "k", language="en")
    dialect.opening()
    dialect.finalize()
    end = dialect.read(json.dumps({"type": "UtteranceEnd", "channel": [0, 1],
                                   "last_word_end": 1.2}))  # fmt: skip
    assert isinstance(end[0], Words) and end[0].end_of_speech and not end[0].text
    alt = {"transcript": "hola", "languages": ["es"], "words": []}
    results = {"type": "Results", "is_final": True, "speech_final": True,
               "from_finalize": True, "channel": {"alternatives": [alt]}}  # fmt: skip
    signals = dialect.read(json.dumps(results))
    assert [type(s) for s in signals] == [Words, Flushed]
    first = signals[0]
    assert isinstance(first, Words) and first.end_of_speech and first.language == "es"
    error = {"type": "Error", "variant": "SchemaError", "description": "secret account 42"}
    failed = dialect.read(json.dumps(error))
    assert isinstance(failed[0], Failed) and isinstance(failed[0].error, ServiceBadResponseError)
    assert "secret" not in str(failed[0].error) and "secret" in failed[0].error.detail
    assert dialect.read(json.dumps({"type": "Metadata"})) == [] and dialect.read(b"x") == []


async def test_transcribe_a_whole_utterance(stub: DeepgramStub) -> None:
    stub.transcriber = lambda audio: f"{len(audio) // 32} ms"
    stt = DeepgramSTT(stub.api_key, base_url=stub.url)
    transcript = await stt.transcribe(np.ones(24000, dtype=np.int16))  # 1.5 s, one send
    assert transcript.text == "1500 ms"
    assert stub.sessions[-1].audio == 48000
    await asyncio.sleep(0.1)
    assert stub.sessions[-1].closed_by_client
    assert {"type": "CloseStream"} in stub.sessions[-1].messages


async def test_the_official_sdk_drives_the_stub(stub: DeepgramStub) -> None:
    from deepgram import AsyncDeepgramClient
    from deepgram.environment import DeepgramClientEnvironment

    stub.script("the sdk heard this")
    http = stub.url.replace("ws://", "http://")
    environment = DeepgramClientEnvironment(base=http, production=stub.url, agent=stub.url,
                                            agent_rest=http)  # fmt: skip
    client = AsyncDeepgramClient(api_key=stub.api_key, environment=environment)
    results: list[Any] = []
    async with client.listen.v1.connect(model="nova-3", encoding="linear16", sample_rate=16000,
                                        channels=1, interim_results=True) as socket:  # fmt: skip
        for _ in range(40):  # 0.8 s
            await socket.send_media(b"\x01\x00" * 320)
        await socket.send_finalize()
        async with asyncio.timeout(5):
            while True:
                message = await socket.recv()
                results.append(message)
                if getattr(message, "from_finalize", False):
                    break
        await socket.send_close_stream()
        async with asyncio.timeout(5):
            metadata = await socket.recv()
    kinds = [type(m).__name__ for m in results]
    assert set(kinds) == {"ListenV1Results"} and not results[0].is_final  # an interim first
    final = results[-1]
    assert final.is_final and final.channel.alternatives[0].transcript == "the sdk heard this"
    assert final.channel.alternatives[0].words[0].word == "the"
    assert final.channel.alternatives[0].words[-1].end == pytest.approx(0.8)
    assert type(metadata).__name__ == "ListenV1Metadata" and metadata.duration == 0.8
    session = stub.sessions[-1]
    assert session.headers["authorization"] == f"Token {stub.api_key}"
    assert session.query["interim_results"] == "true" and session.closed_by_client


async def test_audio_held_for_an_unreachable_vendor_stays_within_its_bound() -> None:
    from pipeline.services.socket_stt import MAX_HELD_BYTES

    stt = DeepgramSTT("k", base_url="ws://127.0.0.1:9", connect_timeout=0.5)
    stream = stt.open_live()
    frame = bytes(640)  # 20 ms
    for _ in range(70 * 50):  # 70 s of speech while nothing answers
        stream.send(frame)
    assert 0 < stream._held_bytes <= MAX_HELD_BYTES
    assert sum(map(len, stream._held)) == stream._held_bytes
    await stream.aclose()
