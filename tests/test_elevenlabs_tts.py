"""ElevenLabsTTS against the fake multi-stream-input socket on 127.0.0.1
(testkit/elevenlabs_stub.py); the official SDK's own websocket client driving the same
fake, and the SDK's message types read over what both sides sent, is what shows the
fake faithful."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel

from pipeline.services.circuit import CircuitBreaker, CircuitState
from pipeline.services.elevenlabs_tts import ElevenLabsDialect, ElevenLabsTTS
from pipeline.services.errors import (
    ServiceAuthError,
    ServiceBadResponseError,
    ServiceUnreachableError,
)
from pipeline.services.live_tts import SpokenText
from pipeline.services.socket_tts import SocketTTSConnection
from pipeline.services.tts_dialect import Audio, Done, Failed, Timestamps
from testkit.elevenlabs_stub import ElevenLabsStub

CHAR = 0.06  # seconds of the stub's tone per character


@pytest.fixture
def stub() -> Iterator[ElevenLabsStub]:
    with ElevenLabsStub() as server:
        server.first_audio_delay = 0.01
        yield server


@pytest.fixture
async def make(stub: ElevenLabsStub) -> AsyncIterator[Callable[..., SocketTTSConnection]]:
    connections: list[SocketTTSConnection] = []

    def factory(**kwargs: Any) -> SocketTTSConnection:
        kwargs.setdefault("base_url", stub.url)
        connection = ElevenLabsTTS(kwargs.pop("api_key", stub.api_key), **kwargs).open_live()
        connections.append(connection)
        return connection

    yield factory
    for connection in connections:
        await connection.aclose()
    await asyncio.sleep(0.05)  # sockets given up close in tasks of their own


async def say(context: Any, text: str) -> tuple[SpokenText, np.ndarray]:
    """One sentence's text (with its word times) and all its audio."""
    sentence = SpokenText(text)
    chunks: list[np.ndarray] = []
    async with aclosing(context.say(sentence)) as audio:
        async for pcm in audio:
            chunks.append(pcm)
    return sentence, np.concatenate(chunks)


def sent_to(session: Any, context: str) -> list[dict[str, Any]]:
    return [m for m in session.messages if m.get("context_id") == context]


async def test_two_sentences_share_one_socket_and_context(stub: ElevenLabsStub, make: Any) -> None:
    connection = make()
    context = connection.context()
    first, one = await say(context, "Hello there, friend.")
    second, two = await say(context, "How  are you today?")
    context.close()
    assert len(one) == stub.samples("Hello there, friend.")  # its own audio, all of it
    assert len(two) == stub.samples("How are you today?")
    assert len(stub.sessions) == 1
    session = stub.sessions[0]
    assert [m["text"] for m in sent_to(session, context.id) if "text" in m] == [
        " ",
        "Hello there, friend. ",
        "How are you today? ",
    ]  # one context opened once, then each sentence and its flush
    assert sum(bool(m.get("flush")) for m in session.messages) == 2
    assert session.flushed == [(context.id, "Hello there, friend. "),
                               (context.id, "How are you today? ")]  # fmt: skip
    starts = [w.start for w in first.words]
    assert first[: first.words[-1].until] == "Hello there, friend."
    assert starts == pytest.approx([0.0, 6 * CHAR, 13 * CHAR])  # "there," after "Hello "
    assert [w.start for w in second.words] == pytest.approx([0.0, 4 * CHAR, 8 * CHAR, 12 * CHAR])
    assert second.words[-1].end == pytest.approx(len("How are you today?") * CHAR)
    await asyncio.sleep(0.05)
    assert {"context_id": context.id, "close_context": True} in session.messages


async def test_a_cancel_sends_close_context_and_drops_its_audio(
    stub: ElevenLabsStub, make: Any
) -> None:
    stub.chunk_chars = 1  # many chunks: the cancelled flush goes on being spoken
    connection = make()
    cut = connection.context()
    async with aclosing(cut.say(SpokenText("This long sentence is cut short now."))) as audio:
        async for _ in audio:
            break  # a barge-in
    cut.close()  # nothing more to send for it
    following = connection.context()
    _, pcm = await say(following, "Next one.")
    assert len(pcm) == stub.samples("Next one.")  # none of the cut context's audio
    session = stub.sessions[-1]
    assert sent_to(session, cut.id)[-1] == {"context_id": cut.id, "close_context": True}
    assert sum(bool(m.get("close_context")) for m in sent_to(session, cut.id)) == 1
    assert session.cancels == [cut.id]
    names = [m.get("contextId") for m in session.sent if m.get("audio")]
    assert names.index(following.id) < len(names) - 1 - names[::-1].index(cut.id)


async def test_a_drop_before_audio_is_retried_on_a_new_socket(
    stub: ElevenLabsStub, make: Any
) -> None:
    stub.drop_after(0)
    context = make().context()
    sentence, pcm = await say(context, "Try it again.")
    assert len(pcm) == stub.samples("Try it again.")
    assert len(stub.sessions) == 2
    (lost, text), (kept, again) = stub.sessions[0].flushed[0], stub.sessions[1].flushed[0]
    assert text == again == "Try it again. " and lost != kept == context.id  # a new context
    assert [w.start for w in sentence.words] == pytest.approx([0.0, 4 * CHAR, 7 * CHAR])


async def test_a_drop_after_audio_fails_the_sentence(stub: ElevenLabsStub, make: Any) -> None:
    stub.drop_after(1)
    context = make().context()
    heard: list[np.ndarray] = []
    with pytest.raises(ServiceUnreachableError):
        async with aclosing(context.say(SpokenText("Cut off in the middle."))) as audio:
            async for pcm in audio:
                heard.append(pcm)
    assert sum(map(len, heard)) == 5 * 24000 * stub.char_ms // 1000  # the one chunk sent
    assert len(stub.sessions) == 1  # not sent again: it would be heard twice
    _, pcm = await say(context, "Back again.")  # the next sentence reconnects
    assert len(pcm) == stub.samples("Back again.") and len(stub.sessions) == 2


async def test_a_refused_key_names_the_variable(stub: ElevenLabsStub, make: Any) -> None:
    stub.refuse_key()
    breaker = CircuitBreaker("tts", threshold=2, cooldown=60)
    context = make(breaker=breaker).context()
    with pytest.raises(ServiceAuthError) as caught:
        await say(context, "Hello.")
    assert "ELEVENLABS_API_KEY" in str(caught.value)
    assert breaker.state is CircuitState.CLOSED  # counted once
    assert stub.sessions == []


async def test_a_wrong_key_is_refused(make: Any) -> None:
    with pytest.raises(ServiceAuthError) as caught:
        await say(make(api_key="wrong-key").context(), "Hello.")
    assert "wrong-key" not in str(caught.value)


async def test_synthesize_one_text(stub: ElevenLabsStub) -> None:
    tts = ElevenLabsTTS(stub.api_key, base_url=stub.url)
    chunks = [pcm async for pcm in tts.synthesize("Just one text.")]
    assert sum(map(len, chunks)) == stub.samples("Just one text.")
    await asyncio.sleep(0.05)
    session = stub.sessions[-1]
    assert session.messages[-1] == {"close_socket": True} and session.closed_by_client


async def test_query_headers_and_rate(stub: ElevenLabsStub, make: Any) -> None:
    context = make(language="de", sample_rate=16000, voice="voice-1").context()
    _, pcm = await say(context, "Guten Tag.")
    assert len(pcm) == stub.samples("Guten Tag.", 16000)
    session = stub.sessions[-1]
    assert session.path == "/v1/text-to-speech/voice-1/multi-stream-input"
    assert session.query == {"model_id": "eleven_flash_v2_5", "output_format": "pcm_16000",
                             "sync_alignment": "true", "inactivity_timeout": "180",
                             "auto_mode": "true", "language_code": "de"}  # fmt: skip
    assert session.headers["xi-api-key"] == stub.api_key


def test_base_url_replaces_scheme_and_host_only() -> None:
    url = ElevenLabsTTS("k", base_url="http://127.0.0.1:9/ignored").url
    assert url.startswith("ws://127.0.0.1:9/v1/text-to-speech/21m00Tcm4TlvDq8ikWAM/")
    assert ElevenLabsTTS("k").url.startswith(
        "wss://api.elevenlabs.io/v1/text-to-speech/21m00Tcm4TlvDq8ikWAM/multi-stream-input?"
        "model_id=eleven_flash_v2_5&output_format=pcm_24000"
    )
    assert "language_code" not in ElevenLabsTTS("k").url
    with pytest.raises(ValueError):
        ElevenLabsTTS("k", sample_rate=12345)


def chunk(context: str, chars: str, pcm: bytes = b"\0\0" * 240, **extra: Any) -> str:
    """An audio message whose alignment gives each character 10 ms."""
    alignment = {"chars": list(chars), "charStartTimesMs": [10 * i for i in range(len(chars))],
                 "charDurationsMs": [10] * len(chars)}  # fmt: skip
    audio = base64.b64encode(pcm).decode()
    return json.dumps({"audio": audio, "alignment": alignment, "contextId": context, **extra})


def test_reading_elevenlabs_messages() -> None:
    dialect = ElevenLabsDialect("ws://x", "k", sample_rate=24000)
    dialect.opening()
    messages = [json.loads(m) for m in dialect.speak("c", "Hi  there, you.", True)]
    assert messages == [{"text": " ", "context_id": "c"},
                        {"text": "Hi there, you. ", "context_id": "c"},
                        {"context_id": "c", "flush": True}]  # fmt: skip
    # Spaces dropped and added by the vendor; a word split across chunks (10 ms each).
    first = dialect.read(chunk("c", " Hi th"))
    assert [type(s) for s in first] == [Audio, Timestamps]
    assert first[1] == Timestamps("c", (("Hi", 0.01, 0.03),))
    last = dialect.read(chunk("c", "ere,you."))
    assert [type(s) for s in last] == [Audio, Timestamps, Done]
    words = last[1]
    assert isinstance(words, Timestamps)  # "there," began 10 ms into the first chunk's end
    assert words.words == (("there,you.", 0.04, 0.09),)  # 0.01 s of audio before, +80 ms
    assert dialect.read(chunk("c", " ")) == []  # a tail after its Done: not the next one's
    dialect.speak("c", "Open.", False)
    ended = dialect.read(json.dumps({"is_final": True, "contextId": "c"}))
    assert ended == [Done("c")]  # the vendor closed the context: the sentence is over
    error = {"message": "secret account 42", "error": "quota_exceeded", "code": 1008}
    failed = dialect.read(json.dumps(error))
    assert isinstance(failed[0], Failed) and failed[0].context is None
    assert isinstance(failed[0].error, ServiceBadResponseError)
    assert "secret" not in str(failed[0].error) and "secret" in failed[0].error.detail
    assert dialect.read(b"\x00") == [] and dialect.read(chunk("gone", "ab"))[1:] == []
    assert dialect.cancel("c") == [json.dumps({"context_id": "c", "close_context": True})]
    assert dialect.closing() == json.dumps({"close_socket": True}) and dialect.keepalive() is None


# convert_realtime reads ConnectionClosed.code, which websockets 13.1 deprecated.
@pytest.mark.filterwarnings("ignore:ConnectionClosed.code is deprecated:DeprecationWarning")
async def test_the_official_sdk_drives_the_stub(stub: ElevenLabsStub) -> None:
    """The SDK (2.78) has no multi-context client: its ``convert_realtime`` (sync,
    single-context ``/stream-input``) drives the stub, and its multi-context pydantic
    types (``SendMessageMulti``/``ReceiveMessageMulti``) read every message ElevenLabsTTS
    and the stub exchanged on ``/multi-stream-input``, with no field left unknown."""
    from elevenlabs import types as el
    from elevenlabs.client import ElevenLabs

    client = ElevenLabs(api_key=stub.api_key, base_url=stub.url.replace("ws://", "http://"))
    # convert_realtime always makes the scheme wss; the stub speaks plain ws.
    client.text_to_speech._ws_base_url = stub.url

    def speak() -> bytes:
        text = iter(["Hello from ", "the SDK."])
        stream = client.text_to_speech.convert_realtime(
            "voice-sdk", text=text, model_id="eleven_flash_v2_5", output_format="pcm_16000"
        )
        return b"".join(stream)

    audio = await asyncio.wait_for(asyncio.to_thread(speak), 5)
    sdk = stub.sessions[-1]
    assert len(audio) == 2 * stub.samples("Hello from the SDK.", 16000)
    assert sdk.path == "/v1/text-to-speech/voice-sdk/stream-input"
    assert sdk.headers["xi-api-key"] == stub.api_key and sdk.sent[-1] == {"isFinal": True}

    tts = ElevenLabsTTS(stub.api_key, base_url=stub.url)
    assert [pcm async for pcm in tts.synthesize("Typed both ways.")]
    await asyncio.sleep(0.05)
    session = stub.sessions[-1]
    for message in session.messages:
        kind: type[BaseModel] = el.SendTextMulti
        if "close_socket" in message:
            kind = el.CloseSocket
        elif "close_context" in message:
            kind = el.CloseContext
        elif "flush" in message:
            kind = el.FlushContext
        elif message["text"] == " ":
            kind = el.InitializeConnectionMulti
        assert kind.model_validate(message).model_extra == {}, message
    for message in session.sent:
        if "isFinal" in message:
            final = el.FinalOutputMulti.model_validate(message)
            assert final.model_extra == {} and final.context_id, message
        else:
            chunk = el.AudioOutputMulti.model_validate(message)
            assert chunk.model_extra == {} and chunk.context_id, message
    audio_messages = [el.AudioOutputMulti.model_validate(m) for m in session.sent if "audio" in m]
    alignment = audio_messages[0].alignment
    assert (
        alignment is not None
        and alignment.chars
        and alignment.char_start_times_ms == [60 * i for i in range(len(alignment.chars))]
    )
