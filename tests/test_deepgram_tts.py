"""DeepgramTTS against the fake speak v1 socket on 127.0.0.1
(testkit/deepgram_tts_stub.py); the official SDK's own websocket client driving the same
fake is what shows the fake faithful."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import numpy as np
import pytest

from pipeline.services.deepgram_tts import DeepgramSpeakDialect, DeepgramTTS
from pipeline.services.errors import ServiceAuthError, ServiceError
from pipeline.services.live_tts import SpokenText
from pipeline.services.socket_tts import SocketTTSConnection
from pipeline.services.tts_dialect import Audio, Done, Failed
from testkit.deepgram_tts_stub import DeepgramTTSStub, tone

RATE = 24000
FIRST = "Hello there, how are you today?"
SECOND = "I can help with that."


@pytest.fixture
def stub() -> Iterator[DeepgramTTSStub]:
    with DeepgramTTSStub() as server:
        yield server


@pytest.fixture
async def make(stub: DeepgramTTSStub) -> AsyncIterator[Callable[..., SocketTTSConnection]]:
    connections: list[SocketTTSConnection] = []

    def factory(**kwargs: Any) -> SocketTTSConnection:
        kwargs.setdefault("base_url", stub.url)
        tts = DeepgramTTS(kwargs.pop("api_key", stub.api_key), **kwargs)
        connection = tts.open_live()
        connections.append(connection)
        return connection

    yield factory
    for connection in connections:
        await connection.aclose()


async def spoken(connection: SocketTTSConnection, text: str) -> bytes:
    """One sentence on a context of its own, as the bytes it came as."""
    context = connection.context()
    chunks = [pcm async for pcm in context.say(SpokenText(text))]
    context.close()
    return np.concatenate(chunks).astype("<i2").tobytes()


async def test_two_sentences_on_one_socket(stub: DeepgramTTSStub, make: Any) -> None:
    connection = make()
    context = connection.context()
    for text in (FIRST, SECOND):
        chunks = [pcm async for pcm in context.say(SpokenText(text))]
        assert np.concatenate(chunks).tobytes() == tone(text, RATE)  # its own, exactly
    context.close()
    assert len(stub.sessions) == 1
    session = stub.sessions[0]
    assert session.texts == [FIRST, SECOND] and session.flushes == 2
    assert session.messages[:2] == [{"type": "Speak", "text": FIRST}, {"type": "Flush"}]
    assert session.query == {"model": "aura-2-thalia-en", "encoding": "linear16",
                             "sample_rate": "24000"}  # fmt: skip
    assert session.headers["authorization"] == f"Token {stub.api_key}"


async def test_a_cancel_drops_the_late_audio(stub: DeepgramTTSStub, make: Any) -> None:
    stub.pace = 0.01
    stub.clear_delay = 0.05  # Deepgram keeps sending for a while after a Clear
    connection = make()
    context = connection.context()
    heard = 0
    async with contextlib.aclosing(context.say(SpokenText(FIRST * 3))) as audio:
        async for pcm in audio:
            heard += len(pcm)
            if heard >= RATE // 5:
                break  # a barge-in
    assert await spoken(connection, SECOND) == tone(SECOND, RATE)  # none of FIRST's
    session = stub.sessions[0]
    assert session.late_audio > 0  # late audio did come, and was dropped
    assert session.clears == 1 and {"type": "Clear"} in session.messages
    clear = session.messages.index({"type": "Clear"})
    assert clear < session.messages.index({"type": "Speak", "text": SECOND})
    assert len(stub.sessions) == 1


async def test_two_contexts_are_serialized(stub: DeepgramTTSStub, make: Any) -> None:
    stub.pace = 0.005
    connection = make()
    first, second = await asyncio.gather(spoken(connection, FIRST), spoken(connection, SECOND))
    assert first == tone(FIRST, RATE) and second == tone(SECOND, RATE)
    assert sorted(stub.sessions[0].texts) == sorted([FIRST, SECOND])


async def test_a_drop_before_audio_is_retried(stub: DeepgramTTSStub, make: Any) -> None:
    stub.drop_after(0)  # the call's first socket drops as its first audio is due
    connection = make()
    assert await spoken(connection, FIRST) == tone(FIRST, RATE)
    assert len(stub.sessions) == 2  # the dropped socket, then the retry's
    assert stub.sessions[0].texts == [FIRST] == stub.sessions[1].texts


async def test_a_drop_after_audio_fails(stub: DeepgramTTSStub, make: Any) -> None:
    stub.drop_after(RATE // 5)
    stub.pace = 0.01
    connection = make()
    heard = 0
    with pytest.raises(ServiceError):
        async for pcm in connection.context().say(SpokenText(FIRST)):
            heard += len(pcm)
    assert 0 < heard < len(tone(FIRST, RATE)) // 2
    assert len(stub.sessions) == 1  # not sent again: it would be heard twice


async def test_a_refused_key_names_the_variable(stub: DeepgramTTSStub, make: Any) -> None:
    stub.refuse_key()
    connection = make()
    with pytest.raises(ServiceAuthError) as caught:
        await spoken(connection, FIRST)
    assert "DEEPGRAM_API_KEY" in str(caught.value)


async def test_synthesize(stub: DeepgramTTSStub) -> None:
    tts = DeepgramTTS(stub.api_key, base_url=stub.url, sample_rate=16000)
    chunks = [pcm async for pcm in tts.synthesize(SECOND)]
    assert np.concatenate(chunks).tobytes() == tone(SECOND, 16000)
    await asyncio.sleep(0.05)
    session = stub.sessions[-1]
    assert session.query["sample_rate"] == "16000"
    assert session.messages[-1] == {"type": "Close"} and session.closed_by_client


def test_urls_and_voices() -> None:
    tts = DeepgramTTS("k", base_url="http://127.0.0.1:8123/ignored")
    assert tts.url == (
        "ws://127.0.0.1:8123/v1/speak?model=aura-2-thalia-en&encoding=linear16&sample_rate=24000"
    )
    assert DeepgramTTS("k").url.startswith("wss://api.deepgram.com/v1/speak?")
    assert DeepgramTTS("k", voice="aura-2-zeus-en").model == "aura-2-zeus-en"
    with pytest.raises(ValueError):
        DeepgramTTS("k", voice="alloy")
    with pytest.raises(ValueError):
        DeepgramTTS("k", sample_rate=22050)


def test_reading_speak_messages() -> None:
    dialect = DeepgramSpeakDialect("ws://x", "k")
    assert dialect.speak("c", "Hi.", True) == ['{"type": "Speak", "text": "Hi."}',
                                               '{"type": "Flush"}']  # fmt: skip
    assert dialect.cancel("c") == ['{"type": "Clear"}'] and dialect.end("c") == []
    assert dialect.closing() == '{"type": "Close"}' and dialect.keepalive() is None
    assert dialect.read(b"\x01\x00") == [Audio(None, b"\x01\x00")]
    assert dialect.read(json.dumps({"type": "Flushed", "sequence_id": 0})) == [Done(None)]
    cleared = dialect.read(json.dumps({"type": "Cleared", "sequence_id": 1}))
    assert cleared == [Done(None, cleared=True)]
    assert dialect.read(json.dumps({"type": "Warning", "code": "W", "description": "d"})) == []
    assert dialect.read(json.dumps({"type": "Metadata", "request_id": "r"})) == []
    failed = dialect.read(json.dumps({"type": "Error", "description": "secret 42"}))
    assert isinstance(failed[0], Failed) and "secret" in failed[0].error.detail
    assert "secret" not in str(failed[0].error)


async def test_the_official_sdk_drives_the_stub(stub: DeepgramTTSStub) -> None:
    from deepgram import AsyncDeepgramClient
    from deepgram.environment import DeepgramClientEnvironment
    from deepgram.speak.v1.types import SpeakV1Text

    http = stub.url.replace("ws://", "http://")
    environment = DeepgramClientEnvironment(base=http, production=stub.url, agent=stub.url,
                                            agent_rest=http)  # fmt: skip
    client = AsyncDeepgramClient(api_key=stub.api_key, environment=environment)
    audio = bytearray()
    received: list[Any] = []
    async with client.speak.v1.connect(model="aura-2-thalia-en", encoding="linear16",
                                       sample_rate=24000) as socket:  # fmt: skip
        await socket.send_text(SpeakV1Text(text=SECOND))
        await socket.send_flush()
        async with asyncio.timeout(5):
            while True:
                message = await socket.recv()
                if isinstance(message, bytes):
                    audio += message
                    continue
                received.append(message)
                if getattr(message, "type", None) == "Flushed":
                    break
        await socket.send_clear()
        async with asyncio.timeout(5):
            received.append(await socket.recv())
        await socket.send_close()
    metadata, flushed, cleared = received
    assert type(metadata).__name__ == "SpeakV1Metadata"
    assert metadata.model_name == "aura-2-thalia-en"
    assert flushed.type == "Flushed" and flushed.sequence_id == 0
    assert cleared.type == "Cleared" and cleared.sequence_id == 0
    assert bytes(audio) == tone(SECOND, 24000)
    await asyncio.sleep(0.05)
    session = stub.sessions[-1]
    assert session.headers["authorization"] == f"Token {stub.api_key}"
    assert session.query["sample_rate"] == "24000" and session.closed_by_client
    assert session.messages == [{"type": "Speak", "text": SECOND}, {"type": "Flush"},
                                {"type": "Clear"}, {"type": "Close"}]  # fmt: skip
