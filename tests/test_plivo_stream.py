"""Plivo Audio Streams messages (server/telephony/plivo.py), as Plivo's stream-event
protocol shows them: the start (with no connected before it), audio, keys, checkpoints
played, and playAudio, checkpoint and clearAudio going back."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from server.telephony.g711 import G711Decoder, G711Encoder
from server.telephony.plivo import PlivoStream
from server.telephony.stream_events import (
    StreamAudio,
    StreamDtmf,
    StreamMarkPlayed,
    StreamProtocolError,
    StreamStarted,
    StreamStopped,
)

SID = "87654321-4321-4321-4321-cba987654321"
CALL = "12345678-1234-1234-1234-123456789abc"
START = {
    "event": "start",
    "sequenceNumber": 1,
    "start": {
        "callId": CALL,
        "streamId": SID,
        "accountId": "MAXXXXXXXXXXXXXXXXXX",
        "tracks": ["inbound"],
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000},
    },
    "extra_headers": "userId=12345;sessionId=abc-xyz",
}


def media(payload: bytes, n: int = 2) -> str:
    body = {"track": "inbound", "timestamp": str(1712345678000 + 20 * n), "chunk": n,
            "payload": base64.b64encode(payload).decode()}  # fmt: skip
    return json.dumps({"event": "media", "sequenceNumber": n, "streamId": SID, "media": body})


def started() -> PlivoStream:
    stream = PlivoStream()
    assert isinstance(stream.parse(json.dumps(START)), StreamStarted)
    return stream


def test_the_start_gives_the_call_and_its_extra_headers() -> None:
    assert PlivoStream().parse(json.dumps(START)) == StreamStarted(
        stream_id=SID, call_id=CALL, encoding="mulaw", sample_rate=8000,
        parameters={"extra_headers": "userId=12345;sessionId=abc-xyz"},
    )  # fmt: skip


def test_media_is_the_callers_voice_at_16_khz() -> None:
    stream = started()
    seconds = np.arange(4000) / 8000
    tone = (8000 * np.sin(2 * np.pi * 250 * seconds)).astype(np.int16)
    encoder = G711Encoder("mulaw")
    events = [
        stream.parse(media(encoder.encode(tone[i : i + 160].tobytes(), 8000), n))
        for n, i in enumerate(range(0, tone.size, 160))
    ]
    assert all(isinstance(e, StreamAudio) for e in events)
    pcm = np.frombuffer(b"".join(e.pcm for e in events if isinstance(e, StreamAudio)), np.int16)
    assert 0.98 * 8000 <= pcm.size <= 8000  # half a second at 16 kHz
    level = np.sqrt(np.mean(pcm[1000:].astype(np.float64) ** 2))
    assert 5000 < level < 6300  # 8000/√2


def test_keys_checkpoints_played_and_cleared() -> None:
    stream = started()
    dtmf = {"event": "dtmf", "sequenceNumber": 5, "streamId": SID,
            "dtmf": {"track": "inbound", "digit": "7", "timestamp": "1712345679000"}}  # fmt: skip
    played = {"event": "playedStream", "sequenceNumber": 6, "streamId": SID, "name": "reply-3"}
    cleared = {"event": "clearedAudio", "sequenceNumber": 7, "streamId": SID}
    assert stream.parse(json.dumps(dtmf)) == StreamDtmf("7")
    assert stream.parse(json.dumps(played)) == StreamMarkPlayed("reply-3")
    assert stream.parse(json.dumps(cleared)) is None
    # Plivo documents no stop (its socket closes), but one ends the call all the same.
    assert stream.parse(json.dumps({"event": "stop", "streamId": SID})) == StreamStopped()


def test_what_goes_back_is_play_audio_checkpoint_and_clear_audio() -> None:
    stream = started()
    tone = (8000 * np.sin(2 * np.pi * 250 * np.arange(16000) / 16000)).astype(np.int16)
    sent = [
        json.loads(stream.media(tone[i : i + 320].tobytes(), 16000)) for i in range(0, 16000, 320)
    ]
    assert {(m["event"], m["streamId"]) for m in sent} == {("playAudio", SID)}
    assert {(m["media"]["contentType"], m["media"]["sampleRate"]) for m in sent} == {
        ("audio/x-mulaw", 8000)
    }  # fmt: skip
    mulaw = [base64.b64decode(m["media"]["payload"]) for m in sent]
    assert [len(m) for m in mulaw[1:]] == [160] * 49
    back = np.frombuffer(G711Decoder("mulaw").decode(b"".join(mulaw)), np.int16)
    assert 5000 < np.sqrt(np.mean(back[1000:].astype(np.float64) ** 2)) < 6300
    assert json.loads(stream.mark("reply-3")) == {
        "event": "checkpoint", "streamId": SID, "name": "reply-3"
    }  # fmt: skip
    assert json.loads(stream.clear()) == {"event": "clearAudio", "streamId": SID}


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (b"{}", "text messages only"),
        ("{", "not JSON"),
        (json.dumps({"event": "connected"}), "before start"),
        (media(bytes(160)), "before start"),
        (json.dumps({**START, "start": {**START["start"], "streamId": None}}), "streamId"),
        (json.dumps({**START, "extra_headers": {"a": 1}}), "extra_headers must be a string"),
        (json.dumps({**START, "start": "x"}), "without its 'start' object"),
    ],
)
def test_bad_messages_before_the_start_are_refused_with_a_reason(
    message: str | bytes, reason: str
) -> None:
    with pytest.raises(StreamProtocolError, match=reason):
        PlivoStream().parse(message)


@pytest.mark.parametrize(
    "media_format",
    [
        {"encoding": "audio/x-l16", "sampleRate": 16000},
        {"encoding": "audio/x-mulaw", "sampleRate": 16000},
        "audio/x-mulaw",
    ],
)
def test_a_stream_in_another_format_is_refused(media_format: object) -> None:
    start = {**START, "start": {**START["start"], "mediaFormat": media_format}}
    with pytest.raises(StreamProtocolError, match=r"media format|mediaFormat"):
        PlivoStream().parse(json.dumps(start))


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (START, "a second start"),
        ({"event": "media", "streamId": SID, "media": {}}, "without media.payload"),
        ({"event": "dtmf", "streamId": SID, "dtmf": {"digit": 5}}, "not a DTMF digit"),
        ({"event": "playedStream", "streamId": SID}, "without its name"),
        ({"event": "mark", "streamId": SID, "mark": {"name": "m"}}, "unknown event 'mark'"),
    ],
)
def test_bad_messages_in_a_call_are_refused_with_a_reason(message: dict, reason: str) -> None:
    with pytest.raises(StreamProtocolError, match=reason):
        started().parse(json.dumps(message))
