"""Vonage Voice API WebSocket messages (server/telephony/vonage.py), as Vonage's guide
shows them: a text websocket:connected with the NCCO's headers, binary 20 ms PCM frames
both ways, text events (dtmf, notify, cleared) in and actions (clear, notify) out."""

from __future__ import annotations

import json

import numpy as np
import pytest

from server.telephony.json_messages import MAX_MESSAGE
from server.telephony.stream_events import (
    StreamAudio,
    StreamDtmf,
    StreamMarkPlayed,
    StreamProtocolError,
    StreamStarted,
)
from server.telephony.vonage import VonageStream

CALL = "aaaaaaaa-bbbb-cccc-dddd-0123456789ab"


def connected(rate: int = 16000, **headers: object) -> str:
    return json.dumps({"event": "websocket:connected",
                       "content-type": f"audio/l16;rate={rate}", **headers})  # fmt: skip


def opened(rate: int = 16000) -> VonageStream:
    stream = VonageStream()
    assert isinstance(stream.parse(connected(rate, call_uuid=CALL)), StreamStarted)
    return stream


def tone(rate: int, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (7000 * np.sin(2 * np.pi * 350 * t)).astype(np.int16)


def level(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(samples[2000:].astype(np.float64) ** 2)))


def test_connected_starts_the_stream_with_the_ncco_headers() -> None:
    event = VonageStream().parse(connected(16000, call_uuid=CALL, app="demo", n=3))
    assert event == StreamStarted(
        stream_id=CALL, call_id=CALL, encoding="pcm", sample_rate=16000,
        parameters={"call_uuid": CALL, "app": "demo", "n": "3"},
    )  # fmt: skip


def test_without_a_call_uuid_the_stream_gets_a_made_up_id() -> None:
    first, second = VonageStream(), VonageStream()
    a, b = first.parse(connected(8000)), second.parse(connected(8000))
    assert isinstance(a, StreamStarted) and isinstance(b, StreamStarted)
    assert len(a.stream_id) == 32 and a.stream_id != b.stream_id and a.call_id == ""
    assert first.stream_id == a.stream_id
    # The oldest streams' first message has no "event", only the format and the headers.
    old = VonageStream().parse(json.dumps({"app": "demo", "content-type": "audio/l16;rate=16000"}))
    assert isinstance(old, StreamStarted) and old.parameters == {"app": "demo"}


@pytest.mark.parametrize("rate", [8000, 16000, 24000])
def test_binary_frames_are_the_callers_voice_at_16_khz(rate: int) -> None:
    stream, samples = opened(rate), tone(rate)
    frame = rate // 50  # 20 ms: 640 bytes at 16 kHz
    events = [stream.parse(samples[i : i + frame].tobytes()) for i in range(0, samples.size, frame)]
    pcm = np.frombuffer(b"".join(e.pcm for e in events if isinstance(e, StreamAudio)), np.int16)
    assert len(events) == 50 and 0.98 * 16000 <= pcm.size <= 16000
    assert 4500 < level(pcm) < 5400  # 7000/√2
    if rate == 16000:
        assert np.array_equal(pcm, samples)


def test_keys_notifications_and_cleared() -> None:
    stream = opened()
    assert stream.parse(json.dumps({"event": "websocket:dtmf", "digit": "5", "duration": 260})) == (
        StreamDtmf("5")
    )  # fmt: skip
    nested = {"event": "websocket:dtmf", "dtmf": {"digit": "#", "duration": 100}}
    assert stream.parse(json.dumps(nested)) == StreamDtmf("#")
    notify = {"event": "websocket:notify", "payload": {"name": "reply-3"}}
    assert stream.parse(json.dumps(notify)) == StreamMarkPlayed("reply-3")
    assert stream.parse(json.dumps({"event": "websocket:cleared"})) is None


@pytest.mark.parametrize(("rate", "source"), [(16000, 16000), (8000, 16000), (16000, 24000)])
def test_what_goes_back_is_20_ms_binary_frames_at_the_calls_rate(rate: int, source: int) -> None:
    stream, samples = opened(rate), tone(source)
    step = source // 50
    sent = [
        stream.media(samples[i : i + step].tobytes(), source) for i in range(0, samples.size, step)
    ]
    assert all(isinstance(m, bytes) for m in sent)
    assert {len(m) for m in sent} == {rate // 50 * 2}  # every message exactly 20 ms
    assert 4500 < level(np.frombuffer(b"".join(sent), np.int16)) < 5400


def test_marks_are_notify_actions_and_clear_is_an_action() -> None:
    stream = opened()
    assert json.loads(stream.mark("reply-3")) == {
        "action": "notify",
        "payload": {"name": "reply-3"},
    }
    assert json.loads(stream.clear()) == {"action": "clear"}


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (bytes(640), "audio before websocket:connected"),
        (json.dumps({"event": "websocket:dtmf", "digit": "1"}), "before websocket:connected"),
        (json.dumps({"app": "demo"}), "without its 'event' name"),
        ("[]", "JSON object"),
        ("x" * (MAX_MESSAGE + 1), "over"),
        (connected(44100), "unsupported content-type"),
        (
            json.dumps({"event": "websocket:connected", "content-type": "audio/pcmu"}),
            "unsupported content-type",
        ),
        (json.dumps({"event": "websocket:connected"}), "unsupported content-type None"),
    ],
)
def test_bad_messages_before_connected_are_refused_with_a_reason(
    message: str | bytes, reason: str
) -> None:
    with pytest.raises(StreamProtocolError, match=reason):
        VonageStream().parse(message)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (connected(16000), "a second websocket:connected"),
        (bytes(641), "not 16-bit samples"),
        (bytes(MAX_MESSAGE + 2), "over"),
        (json.dumps({"event": "websocket:dtmf", "digit": "55"}), "not a DTMF digit"),
        (json.dumps({"event": "websocket:notify", "payload": {"id": 3}}), "without payload.name"),
        (json.dumps({"event": "websocket:notify"}), "without payload.name"),
        (json.dumps({"event": "websocket:hangup"}), "unknown event"),
    ],
)
def test_bad_messages_in_a_call_are_refused_with_a_reason(
    message: str | bytes, reason: str
) -> None:
    with pytest.raises(StreamProtocolError, match=reason):
        opened().parse(message)


def test_nothing_goes_back_before_connected() -> None:
    for send in (lambda s: s.media(bytes(640), 16000), lambda s: s.mark("m"), VonageStream.clear):
        with pytest.raises(StreamProtocolError, match="before websocket:connected"):
            send(VonageStream())
