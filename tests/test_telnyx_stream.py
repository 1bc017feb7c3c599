"""Telnyx media-streaming messages (server/telephony/telnyx.py), as Telnyx's AsyncAPI
reference shows them: the start, μ-law and A-law audio, keys, marks, errors, the end, and
what goes back."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from server.telephony.g711 import G711Decoder, G711Encoder
from server.telephony.json_messages import MAX_MESSAGE
from server.telephony.stream_events import (
    StreamAudio,
    StreamDtmf,
    StreamMarkPlayed,
    StreamProtocolError,
    StreamStarted,
    StreamStopped,
)
from server.telephony.telnyx import TelnyxStream

SID = "32DE0DEA-53CB-4B21-89A4-9E1819C043BC"
CALL = "v2:T02llQxIyaRkhfRKxgAP8nY511EhFLizdvdUKJiSw8d6A9BborherQ"
CONNECTED = {"event": "connected", "version": "1.0.0"}


def start_message(encoding: str = "PCMU", rate: int = 8000) -> dict:
    return {
        "event": "start",
        "sequence_number": "1",
        "stream_id": SID,
        "start": {
            "user_id": "3E6F995F-85F7-4705-9741-53B116D28237",
            "call_control_id": CALL,
            "call_session_id": "ff55a038-6f5d-11ef-9692-02420aeffb1f",
            "from": "+13122010094",
            "to": "+13122123456",
            "tags": ["TAG1"],
            "client_state": "aGF2ZSBhIG5pY2UgZGF5ID1d",
            "custom_parameters": {"customer_id": "customer_123"},
            "media_format": {"encoding": encoding, "sample_rate": rate, "channels": 1},
        },
    }


def media(payload: bytes, track: str = "inbound", n: int = 2) -> str:
    body = {"track": track, "chunk": str(n), "timestamp": str(20 * n),
            "payload": base64.b64encode(payload).decode()}  # fmt: skip
    return json.dumps({"event": "media", "sequence_number": str(n + 2), "media": body,
                       "stream_id": SID})  # fmt: skip


def started(encoding: str = "PCMU", **kwargs: str) -> TelnyxStream:
    stream = TelnyxStream(**kwargs)
    assert stream.parse(json.dumps(CONNECTED)) is None
    assert isinstance(stream.parse(json.dumps(start_message(encoding))), StreamStarted)
    return stream


def rms(pcm: bytes) -> float:
    return float(np.sqrt(np.mean(np.frombuffer(pcm, np.int16)[1000:].astype(np.float64) ** 2)))


def test_the_start_gives_the_stream_the_call_and_its_custom_parameters() -> None:
    event = TelnyxStream().parse(json.dumps(start_message("PCMA")))
    assert event == StreamStarted(
        stream_id=SID, call_id=CALL, encoding="alaw", sample_rate=8000,
        parameters={"customer_id": "customer_123"},
    )  # fmt: skip


@pytest.mark.parametrize(("encoding", "law"), [("PCMU", "mulaw"), ("PCMA", "alaw")])
def test_media_is_the_callers_voice_at_16_khz(encoding: str, law: str) -> None:
    stream = started(encoding)
    tone = (6000 * np.sin(2 * np.pi * 440 * np.arange(8000) / 8000)).astype(np.int16)
    encoder, heard = G711Encoder(law), []
    for i in range(0, tone.size, 160):  # 20 ms RTP payloads
        event = stream.parse(media(encoder.encode(tone[i : i + 160].tobytes(), 8000)))
        assert isinstance(event, StreamAudio)
        heard.append(event.pcm)
    pcm = b"".join(heard)
    assert 0.98 * 32000 <= len(pcm) <= 32000  # one second of 16 kHz s16
    assert 3800 < rms(pcm) < 4700  # 6000/√2, through the right law


def test_our_own_track_is_not_heard_and_keys_marks_and_the_end_are() -> None:
    stream = started()
    assert stream.parse(media(bytes(160), track="outbound")) is None
    dtmf = {"event": "dtmf", "stream_id": SID, "occurred_at": "2024-09-10T12:00:00Z",
            "sequence_number": "5", "dtmf": {"digit": "#"}}  # fmt: skip
    mark = {"event": "mark", "sequence_number": "6", "stream_id": SID,
            "mark": {"name": "reply-3"}}  # fmt: skip
    stop = {"event": "stop", "sequence_number": "7", "stream_id": SID,
            "stop": {"user_id": "3E6F995F", "call_control_id": CALL}}  # fmt: skip
    assert stream.parse(json.dumps(dtmf)) == StreamDtmf("#")
    assert stream.parse(json.dumps(mark)) == StreamMarkPlayed("reply-3")
    assert stream.parse(json.dumps(stop)) == StreamStopped()


def test_what_goes_back_is_media_mark_and_clear_without_a_stream_id() -> None:
    stream = started()
    frames = [json.loads(stream.media(np.zeros(320, np.int16).tobytes(), 16000)) for _ in range(10)]
    assert {tuple(f) for f in frames} == {("event", "media")}
    sizes = [len(base64.b64decode(f["media"]["payload"])) for f in frames]
    assert sizes[1:] == [160] * 9 and 1600 - 32 <= sum(sizes) <= 1600
    assert json.loads(stream.mark("reply-3")) == {"event": "mark", "mark": {"name": "reply-3"}}
    assert json.loads(stream.clear()) == {"event": "clear"}


def test_the_reply_is_in_the_bidirectional_codec_not_the_callers() -> None:
    stream = started("PCMU", reply_codec="PCMA")
    tone = (6000 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)).astype(np.int16)
    sent = [
        json.loads(stream.media(tone[i : i + 320].tobytes(), 16000)) for i in range(0, 16000, 320)
    ]
    alaw = b"".join(base64.b64decode(f["media"]["payload"]) for f in sent)
    assert 3800 < rms(G711Decoder("alaw").decode(alaw)) < 4700
    with pytest.raises(ValueError, match="PCMU or PCMA"):
        TelnyxStream(reply_codec="OPUS")


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (b"\x00\x01", "text messages only"),
        ("x" * (MAX_MESSAGE + 1), "over"),
        (json.dumps({"event": "media", "media": {"payload": "AAAA"}}), "before start"),
        (json.dumps({"event": ["start"]}), "without its 'event' name"),
        (json.dumps(start_message("G722", 16000)), "unsupported media format"),
        (json.dumps(start_message("PCMU", 16000)), "unsupported media format"),
        (json.dumps({**start_message(), "stream_id": ""}), "without a stream_id"),
    ],
)
def test_bad_messages_before_the_start_are_refused_with_a_reason(
    message: str | bytes, reason: str
) -> None:
    with pytest.raises(StreamProtocolError, match=reason):
        TelnyxStream().parse(message)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (start_message(), "a second start"),
        ({"event": "media", "stream_id": SID, "media": {"payload": "%%%"}}, "not base64"),
        (
            {"event": "media", "stream_id": SID, "media": {"track": "both", "payload": ""}},
            "unknown track",
        ),
        ({"event": "dtmf", "stream_id": SID, "dtmf": {"digit": "X"}}, "not a DTMF digit"),
        ({"event": "mark", "stream_id": SID, "mark": {}}, "without mark.name"),
        (
            {
                "event": "error",
                "stream_id": SID,
                "payload": {"code": 100003, "title": "malformed_frame", "detail": "bad frame"},
            },
            "Telnyx reports an error: bad frame",
        ),
        ({"event": "hangup", "stream_id": SID}, "unknown event"),
    ],
)
def test_bad_messages_in_a_call_are_refused_with_a_reason(message: dict, reason: str) -> None:
    with pytest.raises(StreamProtocolError, match=reason):
        started().parse(json.dumps(message))


def test_nothing_goes_back_before_the_start() -> None:
    for send in (lambda s: s.media(bytes(640), 16000), lambda s: s.mark("m"), TelnyxStream.clear):
        with pytest.raises(StreamProtocolError, match="before start"):
            send(TelnyxStream())
