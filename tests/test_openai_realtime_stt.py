"""OpenAIRealtimeSTT against the fake realtime transcription socket on 127.0.0.1
(testkit/openai_transcription_stub.py); the official SDK's own realtime client driving
the same fake is what shows the fake faithful."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import numpy as np
import pytest

from pipeline.services.circuit import CircuitBreaker, CircuitState
from pipeline.services.errors import ServiceAuthError, ServiceBadResponseError
from pipeline.services.live_stt import Words
from pipeline.services.openai_realtime_stt import (
    OpenAIRealtimeDialect,
    OpenAIRealtimeSTT,
    Upsampler,
)
from pipeline.services.socket_stt import Failed, Flushed, SocketSTTStream
from testkit.openai_transcription_stub import OpenAITranscriptionStub

FRAME = 640  # 20 ms of 16 kHz s16le
BYTES_24K = 48  # per ms at 24 kHz


@pytest.fixture
def stub() -> Iterator[OpenAITranscriptionStub]:
    with OpenAITranscriptionStub() as server:
        yield server


@pytest.fixture
async def make(stub: OpenAITranscriptionStub) -> AsyncIterator[Callable[..., SocketSTTStream]]:
    streams: list[SocketSTTStream] = []

    def factory(on_words: Callable[[Words], None] | None = None, **kwargs: Any) -> SocketSTTStream:
        kwargs.setdefault("base_url", stub.url)
        stt = OpenAIRealtimeSTT(kwargs.pop("api_key", stub.api_key), **kwargs)
        stream = stt.open_live(on_words)
        streams.append(stream)
        return stream

    yield factory
    for stream in streams:
        await stream.aclose()
    await asyncio.sleep(0.05)  # sockets given up close in tasks of their own


def speak(stream: SocketSTTStream, seconds: float) -> None:
    for _ in range(round(seconds * 50)):
        stream.send(b"\x01\x00" * (FRAME // 2))


async def test_scripted_words_per_finalize(stub: OpenAITranscriptionStub, make: Any) -> None:
    stub.script("what time is it")
    heard: list[Words] = []
    stream = make(heard.append)
    speak(stream, 0.6)
    transcript = await stream.finalize()
    assert transcript.text == "what time is it"
    final = [w for w in heard if w.final]
    assert [w.text for w in final] == ["what time is it"] and final[0].words == ()
    interim = [w.text for w in heard if not w.final]
    assert interim == ["what", "what time", "what time is", "what time is it"]  # the deltas


async def test_two_finalizes_in_order(stub: OpenAITranscriptionStub, make: Any) -> None:
    stub.script("first part", "second part")
    stub.delay_next(0.3, 0.0)  # the second completes first: still answered in order
    stream = make()
    speak(stream, 0.3)
    first = stream.finalize()
    speak(stream, 0.3)
    second = stream.finalize()
    assert (await first).text == "first part"
    assert (await second).text == "second part"
    session = stub.sessions[-1]
    assert session.commits == 2 and session.items == [300 * BYTES_24K] * 2
    committed = [m["item_id"] for m in session.sent if m["type"].endswith("buffer.committed")]
    completed = [m["item_id"] for m in session.sent if m["type"].endswith("completed")]
    assert completed == committed[::-1]  # the stub did answer out of order


async def test_the_audio_reaches_the_stub_at_24_khz(
    stub: OpenAITranscriptionStub, make: Any
) -> None:
    stream = make()
    speak(stream, 0.5)
    await stream.finalize()
    assert stub.sessions[-1].audio == 500 * BYTES_24K  # 1.5x the 16 kHz bytes, exactly


def test_the_upsampler_is_seamless() -> None:
    tone = (np.sin(np.arange(16000) * 2 * np.pi * 440 / 16000) * 8000).astype("<i2")
    whole = np.frombuffer(Upsampler()(tone.tobytes()), "<i2")
    chunked = Upsampler()
    pieces = [chunked(tone[i : i + 333].tobytes()) for i in range(0, tone.size, 333)]
    assert np.array_equal(np.frombuffer(b"".join(pieces), "<i2"), whole)  # odd chunks too
    assert whole.size == 24000
    spectrum = np.abs(np.fft.rfft(whole[2400:].astype(float)))
    assert np.argmax(spectrum) * 24000 / (whole.size - 2400) == pytest.approx(440, abs=2)
    split = Upsampler()
    assert split(tone[:1].tobytes()[:1]) == b""  # half a sample waits for its other byte
    assert len(split(tone.tobytes()[1:])) == 24000 * 2


async def test_an_empty_finalize_does_not_fail(stub: OpenAITranscriptionStub, make: Any) -> None:
    stub.min_commit_ms = 1000  # more than the stream sends: the API calls it empty
    stream = make()
    speak(stream, 0.3)
    assert (await stream.finalize()).text == ""
    assert stub.sessions[-1].empty_commits == 1
    stub.min_commit_ms = 100
    speak(stream, 0.3)
    assert (await stream.finalize()).text == "hello world"
    assert stream.reconnects == 0 and stub.sessions[-1].items == [600 * BYTES_24K]


async def test_a_short_tail_is_padded(stub: OpenAITranscriptionStub, make: Any) -> None:
    stream = make()
    speak(stream, 0.04)
    assert (await stream.finalize()).text == "hello world"
    assert stub.sessions[-1].items == [100 * BYTES_24K] and stub.sessions[-1].empty_commits == 0


async def test_a_dropped_socket_is_replayed(stub: OpenAITranscriptionStub, make: Any) -> None:
    stub.script("before the drop", "after the drop")
    stub.drop_after(500 * BYTES_24K)  # mid-way through the second utterance
    heard: list[Words] = []
    stream = make(heard.append)
    speak(stream, 0.3)
    assert (await stream.finalize()).text == "before the drop"
    speak(stream, 0.4)
    await asyncio.sleep(0.2)
    assert (await stream.finalize()).text == "after the drop"
    assert stream.reconnects == 1
    replay = stub.sessions[-1]
    assert replay.audio == 400 * BYTES_24K and replay.commits == 1  # the unconfirmed audio
    assert [w.text for w in heard if w.final] == ["before the drop", "after the drop"]


async def test_a_failed_transcription_fails_its_finalize(
    stub: OpenAITranscriptionStub, make: Any
) -> None:
    stub.fail_next()
    stream = make()
    speak(stream, 0.2)
    with pytest.raises(ServiceBadResponseError) as caught:
        await stream.finalize()
    assert "corrupted" not in str(caught.value) and "corrupted" in caught.value.detail
    speak(stream, 0.2)
    assert (await stream.finalize()).text == "hello world"  # on a fresh socket
    assert stub.sessions[-1].items == [200 * BYTES_24K]


async def test_a_refused_key_names_the_variable(stub: OpenAITranscriptionStub, make: Any) -> None:
    stub.refuse_key()
    breaker = CircuitBreaker("stt", threshold=2, cooldown=60)
    stream = make(breaker=breaker)
    speak(stream, 0.1)
    with pytest.raises(ServiceAuthError) as caught:
        await stream.finalize()
    assert "PARLEY_OPENAI_API_KEY" in str(caught.value)
    assert breaker.state is CircuitState.CLOSED  # counted once, not twice


async def test_a_wrong_key_is_refused(make: Any) -> None:
    stream = make(api_key="sk-wrong")
    speak(stream, 0.1)
    with pytest.raises(ServiceAuthError) as caught:
        await stream.finalize()
    assert "sk-wrong" not in str(caught.value)


async def test_session_update_and_headers(stub: OpenAITranscriptionStub, make: Any) -> None:
    stream = make(language="en-US", model="gpt-4o-mini-transcribe")
    speak(stream, 0.2)
    assert (await stream.finalize()).language == "en-US"
    session = stub.sessions[-1]
    assert session.query == {"intent": "transcription"}
    assert session.headers["authorization"] == f"Bearer {stub.api_key}"
    assert "openai-beta" not in session.headers  # the GA protocol
    update = session.updates[0]["audio"]["input"]
    assert update["turn_detection"] is None and "turn_detection" in update
    assert update["transcription"] == {"model": "gpt-4o-mini-transcribe", "language": "en"}
    assert update["format"] == {"type": "audio/pcm", "rate": 24000}
    assert session.config["audio"]["input"]["turn_detection"] is None  # as the server took it
    assert not [m for m in session.sent if m["type"] == "error"]


async def test_keepalive_changes_nothing(stub: OpenAITranscriptionStub, make: Any) -> None:
    stream = make(keepalive_seconds=0.2)
    speak(stream, 0.1)
    await asyncio.sleep(0.5)
    session = stub.sessions[-1]
    assert {"type": "transcription"} in session.updates
    assert session.config["audio"]["input"]["turn_detection"] is None
    assert (await stream.finalize()).text == "hello world"


async def test_transcribe_a_whole_utterance(stub: OpenAITranscriptionStub) -> None:
    stub.transcriber = lambda audio: f"{len(audio) // BYTES_24K} ms"
    stt = OpenAIRealtimeSTT(stub.api_key, base_url=stub.url)
    transcript = await stt.transcribe(np.ones(24000, dtype=np.int16))  # 1.5 s, one send
    assert transcript.text == "1500 ms"
    assert stub.sessions[-1].audio == 1500 * BYTES_24K
    await asyncio.sleep(0.1)
    assert stub.sessions[-1].closed


async def test_base_url_replaces_scheme_and_host(stub: OpenAITranscriptionStub) -> None:
    default = OpenAIRealtimeSTT("k").url
    assert default == "wss://api.openai.com/v1/realtime?intent=transcription"
    other = OpenAIRealtimeSTT("k", base_url="https://proxy.example:8443/ignored").url
    assert other == "wss://proxy.example:8443/v1/realtime?intent=transcription"
    http = stub.url.replace("ws://", "http://")
    stt = OpenAIRealtimeSTT(stub.api_key, base_url=http + "/v1")
    assert stt.url == f"{stub.url}/v1/realtime?intent=transcription"
    assert (await stt.transcribe(np.ones(3200, dtype=np.int16))).text == "hello world"


def test_reading_the_servers_events() -> None:
    dialect = OpenAIRealtimeDialect("ws://x", "k", model="gpt-4o-transcribe")
    dialect.opening()
    first, second = dialect.finalize()[-1], dialect.finalize()[-1]
    assert json.loads(first)["type"] == "input_audio_buffer.commit"
    second_id = json.loads(second)["event_id"]

    def read(event: dict[str, Any]) -> list[Any]:
        return dialect.read(json.dumps(event))

    assert read({"type": "input_audio_buffer.committed", "item_id": "a"}) == []
    empty = {"type": "error", "error": {"type": "invalid_request_error",
                                        "code": "input_audio_buffer_commit_empty",
                                        "event_id": second_id}}  # fmt: skip
    assert read(empty) == []  # the second is answered, but after the first
    done = read({"type": "conversation.item.input_audio_transcription.completed",
                 "item_id": "a", "transcript": "hi there"})  # fmt: skip
    assert done == [Words("hi there", True), Flushed(), Flushed()]
    stray = read({"type": "conversation.item.input_audio_transcription.completed",
                  "item_id": "z", "transcript": "own commit"})  # fmt: skip
    assert stray == [Words("own commit", True)]  # no request of ours: no Flushed
    error = {"type": "error", "error": {"type": "server_error", "message": "secret 42"}}
    failed = read(error)
    assert isinstance(failed[0], Failed) and isinstance(failed[0].error, ServiceBadResponseError)
    assert "secret" not in str(failed[0].error) and "secret" in failed[0].error.detail
    assert read({"type": "session.created", "session": {}}) == [] and dialect.read(b"x") == []


async def test_the_official_sdk_drives_the_stub(stub: OpenAITranscriptionStub) -> None:
    from openai import AsyncOpenAI

    stub.script("the sdk heard this")
    client = AsyncOpenAI(api_key=stub.api_key, websocket_base_url=stub.url + "/v1")
    audio = base64.b64encode(b"\x01\x00" * 24000).decode()  # 1 s at 24 kHz
    events: list[Any] = []
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as connection:
        await connection.session.update(session={"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None,
            "transcription": {"model": "gpt-4o-transcribe", "language": "en"}}}})  # fmt: skip
        await connection.input_audio_buffer.append(audio=audio)
        await connection.input_audio_buffer.commit()
        async with asyncio.timeout(5):
            async for event in connection:
                events.append(event)
                if event.type.endswith("transcription.completed"):
                    break
    kinds = [type(e).__name__ for e in events]
    assert kinds[:3] == ["SessionCreatedEvent", "SessionUpdatedEvent",
                         "InputAudioBufferCommittedEvent"]  # fmt: skip
    assert set(kinds[3:-1]) == {"ConversationItemInputAudioTranscriptionDeltaEvent"}
    completed = events[-1]
    assert type(completed).__name__ == "ConversationItemInputAudioTranscriptionCompletedEvent"
    assert completed.transcript == "the sdk heard this" and completed.content_index == 0
    assert completed.item_id == events[2].item_id and events[2].previous_item_id is None
    assert "".join(e.delta for e in events[3:-1]) == "the sdk heard this"
    assert completed.usage.type == "tokens"
    assert events[1].session.audio.input.turn_detection is None
    session = stub.sessions[-1]
    assert session.headers["authorization"] == f"Bearer {stub.api_key}"
    assert session.query == {"intent": "transcription"} and session.audio == 48000
    assert session.updates[0]["audio"]["input"]["turn_detection"] is None
