"""AssemblyAISTT against the fake v3 streaming socket on 127.0.0.1
(testkit/assemblyai_stub.py); the official SDK's StreamingClient driving the same fake
is what shows the fake faithful."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import numpy as np
import pytest

from pipeline.services.assemblyai_stt import AssemblyAIDialect, AssemblyAISTT
from pipeline.services.errors import ServiceAuthError, ServiceTimeoutError
from pipeline.services.live_stt import Words
from pipeline.services.socket_stt import Flushed, SocketSTTStream, socket_url
from testkit.assemblyai_stub import AssemblyAIStub

FRAME = 640  # 20 ms of 16 kHz s16le


@pytest.fixture
def stub() -> Iterator[AssemblyAIStub]:
    with AssemblyAIStub() as server:
        yield server


@pytest.fixture
async def make(stub: AssemblyAIStub) -> AsyncIterator[Callable[..., SocketSTTStream]]:
    streams: list[SocketSTTStream] = []

    def factory(on_words: Callable[[Words], None] | None = None, **kwargs: Any) -> SocketSTTStream:
        kwargs.setdefault("base_url", stub.url)
        stt = AssemblyAISTT(kwargs.pop("api_key", stub.api_key), **kwargs)
        stream = stt.open_live(on_words)
        streams.append(stream)
        return stream

    yield factory
    for stream in streams:
        await stream.aclose()


def speak(stream: SocketSTTStream, seconds: float) -> None:
    for _ in range(int(seconds * 50)):
        stream.send(b"\x01\x00" * (FRAME // 2))


async def test_scripted_words_per_finalize(stub: AssemblyAIStub, make: Any) -> None:
    stub.script("good morning")
    heard: list[Words] = []
    stream = make(heard.append)
    speak(stream, 0.5)
    transcript = await stream.finalize()
    assert transcript.text == "good morning"
    final = [w for w in heard if w.final]
    assert len(final) == 1 and final[0].end_of_speech
    assert [w.text for w in final[0].words] == ["good", "morning"]
    assert 0 <= final[0].words[0].start < final[0].words[1].end <= 0.55
    assert any(not w.final for w in heard)  # interim Turns while the audio came


async def test_two_finalizes_in_order(stub: AssemblyAIStub, make: Any) -> None:
    stub.script("first part", "second part")
    stream = make()
    speak(stream, 0.3)
    first = stream.finalize()
    speak(stream, 0.3)
    second = stream.finalize()
    assert (await first).text == "first part"
    assert (await second).text == "second part"
    assert stub.sessions[-1].forces == 2


async def test_a_cancelled_finalize_loses_nothing(stub: AssemblyAIStub, make: Any) -> None:
    stub.script("kept words", "more words")
    stub.endpoint_delay = 0.2
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


async def test_a_dropped_socket_is_replayed(stub: AssemblyAIStub, make: Any) -> None:
    stub.script("before the drop", "after the drop")
    stub.drop_after(int(0.5 * 32000))  # mid-way through the second utterance
    stream = make()
    speak(stream, 0.3)
    assert (await stream.finalize()).text == "before the drop"
    speak(stream, 0.4)
    await asyncio.sleep(0.2)
    assert (await stream.finalize()).text == "after the drop"
    assert stream.reconnects == 1
    replay = stub.sessions[-1]
    assert replay.audio >= 0.4 * 32000 and replay.forces == 1  # only the unconfirmed audio


async def test_frames_are_at_least_50_ms(stub: AssemblyAIStub, make: Any) -> None:
    stream = make()
    speak(stream, 0.33)
    stream.send(b"\x00\x00" * 100)  # a short tail: padded to 50 ms
    await stream.finalize()
    frames = stub.sessions[-1].frames
    assert frames and all(50 * 32 <= size <= 1000 * 32 for size in frames)


async def test_a_bad_key_names_the_variable(make: Any) -> None:
    stream = make(api_key="wrong")
    speak(stream, 0.1)
    with pytest.raises(ServiceAuthError) as caught:
        await stream.finalize()
    assert "ASSEMBLYAI_API_KEY" in str(caught.value)
    assert "wrong" not in str(caught.value)


async def test_finalize_timeout(stub: AssemblyAIStub, make: Any) -> None:
    stub.endpoint_delay = 1.0
    stream = make(finalize_timeout=0.2)
    speak(stream, 0.2)
    with pytest.raises(ServiceTimeoutError):
        await stream.finalize()
    # The stream closes the socket it gave up in a task of its own, which aclose() does
    # not await: let it finish before the loop ends.
    await asyncio.sleep(0.3)


async def test_query_and_headers(stub: AssemblyAIStub, make: Any) -> None:
    stream = make()
    speak(stream, 0.1)
    await stream.finalize()
    session = stub.sessions[-1]
    assert session.query["sample_rate"] == "16000"
    assert session.query["encoding"] == "pcm_s16le"
    assert session.query["speech_model"] == "universal-streaming-english"
    assert session.headers["authorization"] == stub.api_key
    assert AssemblyAISTT("k", language="es").model == "universal-streaming-multilingual"


def test_base_url_scheme() -> None:
    assert socket_url("http://host:81/ignored", "/v3/ws", {"a": 1}) == "ws://host:81/v3/ws?a=1"
    assert socket_url("https://host", "/v3/ws", {}).startswith("wss://host/v3/ws?")
    assert AssemblyAISTT("k").url.startswith("wss://streaming.assemblyai.com/v3/ws?")


def test_format_turns_counts_words_once() -> None:
    dialect = AssemblyAIDialect("ws://x", "k", format_turns=True)
    dialect.opening()
    dialect.finalize()
    turn = {"type": "Turn", "turn_order": 0, "end_of_turn": True, "transcript": "hi", "words": []}
    first = dialect.read(json.dumps({**turn, "turn_is_formatted": False}))
    second = dialect.read(json.dumps({**turn, "turn_is_formatted": True}))
    third = dialect.read(json.dumps({**turn, "turn_is_formatted": True}))
    assert len(first) == 1 and isinstance(first[0], Words) and not first[0].final
    assert [type(s) for s in second] == [Words, Flushed] and third == []


async def test_transcribe_a_whole_utterance(stub: AssemblyAIStub) -> None:
    stub.transcriber = lambda audio: f"{len(audio) // 32} ms"
    stt = AssemblyAISTT(stub.api_key, base_url=stub.url)
    transcript = await stt.transcribe(np.ones(24000, dtype=np.int16))  # 1.5 s, one send
    assert transcript.text == "1500 ms"
    assert all(size <= 32000 for size in stub.sessions[-1].frames)


async def test_the_official_sdk_drives_the_stub(stub: AssemblyAIStub) -> None:
    from assemblyai.streaming.v3 import (
        StreamingClient,
        StreamingClientOptions,
        StreamingEvents,
        StreamingParameters,
    )

    stub.script("the sdk heard this")
    events: list[Any] = []
    ended = threading.Event()

    def run() -> None:
        client = StreamingClient(StreamingClientOptions(api_key=stub.api_key, api_host=stub.url))
        for kind in (StreamingEvents.Begin, StreamingEvents.Turn, StreamingEvents.Termination,
                     StreamingEvents.Error):  # fmt: skip
            client.on(kind, lambda _client, event: events.append(event))

        def on_turn(_client: Any, event: Any) -> None:
            if event.end_of_turn and event.turn_is_formatted:
                ended.set()

        client.on(StreamingEvents.Turn, on_turn)
        client.connect(StreamingParameters(sample_rate=16000, format_turns=True))
        client.stream([b"\x01\x00" * 800] * 10)  # 50 ms frames
        client.force_endpoint()
        assert ended.wait(5)
        client.disconnect(terminate=True)

    await asyncio.to_thread(run)
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "BeginEvent" and kinds[-1] == "TerminationEvent"
    finals = [e for e in events if type(e).__name__ == "TurnEvent" and e.end_of_turn]
    assert [e.turn_is_formatted for e in finals] == [False, True]
    assert finals[-1].transcript == "The sdk heard this."
    assert finals[0].words[0].text == "the" and finals[0].words[0].end > 0
    assert stub.sessions[-1].headers["authorization"] == stub.api_key
