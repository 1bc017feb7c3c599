"""Twilio Media Streams messages (server/telephony/twilio.py), as Twilio's documentation
shows them: a call's start, its audio, a key, a mark, the end, and what goes back."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from server.telephony.g711 import G711Encoder
from server.telephony.stream_events import (
    StreamAudio,
    StreamDtmf,
    StreamMarkPlayed,
    StreamProtocolError,
    StreamStarted,
    StreamStopped,
)
from server.telephony.twilio import MAX_MESSAGE, TwilioStream

SID = "MZ18ad3ab5a668481ce02b83e7395059f0"
CONNECTED = {"event": "connected", "protocol": "Call", "version": "1.0.0"}
START = {
    "event": "start",
    "sequenceNumber": "1",
    "start": {
        "accountSid": "AC00000000000000000000000000000000",
        "streamSid": SID,
        "callSid": "CA00000000000000000000000000000000",
        "tracks": ["inbound"],
        "customParameters": {"caller": "+15555550100", "agent": "support"},
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
    },
    "streamSid": SID,
}


def media(payload: bytes, n: int = 2) -> str:
    body = {"track": "inbound", "chunk": str(n), "timestamp": "20", "payload": ""}
    body["payload"] = base64.b64encode(payload).decode()
    return json.dumps({"event": "media", "sequenceNumber": str(n + 1), "media": body,
                       "streamSid": SID})  # fmt: skip


def started() -> TwilioStream:
    stream = TwilioStream()
    assert stream.parse(json.dumps(CONNECTED)) is None
    assert isinstance(stream.parse(json.dumps(START)), StreamStarted)
    return stream


def test_the_start_gives_the_call_and_its_custom_parameters() -> None:
    event = TwilioStream().parse(json.dumps(START))
    assert event == StreamStarted(
        stream_id=SID, call_id="CA00000000000000000000000000000000", encoding="mulaw",
        sample_rate=8000, parameters={"caller": "+15555550100", "agent": "support"},
    )  # fmt: skip


def test_media_is_the_callers_voice_at_16_khz() -> None:
    stream = started()
    t = np.arange(8000) / 8000
    tone = (6000 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)
    encoder, heard = G711Encoder(), []
    for i in range(0, tone.size, 160):  # 20 ms messages, as Twilio sends them
        event = stream.parse(media(encoder.encode(tone[i : i + 160].tobytes(), 8000)))
        assert isinstance(event, StreamAudio)
        heard.append(event.pcm)
    pcm = np.frombuffer(b"".join(heard), np.int16)
    assert pcm.size >= 0.98 * 16000  # one second at 16 kHz
    assert 3000 < np.sqrt(np.mean(pcm[2000:].astype(np.float64) ** 2)) < 5000  # 6000/√2


def test_keys_marks_and_the_end() -> None:
    stream = started()
    dtmf = {"event": "dtmf", "streamSid": SID, "sequenceNumber": "5",
            "dtmf": {"track": "inbound_track", "digit": "#"}}  # fmt: skip
    mark = {"event": "mark", "sequenceNumber": "6", "streamSid": SID,
            "mark": {"name": "reply-3"}}  # fmt: skip
    stop = {"event": "stop", "sequenceNumber": "7", "streamSid": SID,
            "stop": {"accountSid": "AC0", "callSid": "CA0"}}  # fmt: skip
    assert stream.parse(json.dumps(dtmf)) == StreamDtmf("#")
    assert stream.parse(json.dumps(mark)) == StreamMarkPlayed("reply-3")
    assert stream.parse(json.dumps(stop)) == StreamStopped()


def test_what_goes_back_names_the_stream() -> None:
    stream = started()
    frames = [json.loads(stream.media(np.zeros(320, np.int16).tobytes(), 16000)) for _ in range(10)]
    assert {(f["event"], f["streamSid"]) for f in frames} == {("media", SID)}
    # 20 ms of μ-law a frame; the resampler holds a few samples back at the start.
    sizes = [len(base64.b64decode(f["media"]["payload"])) for f in frames]
    assert sizes[1:] == [160] * 9 and 1600 - 32 <= sum(sizes) <= 1600
    assert json.loads(stream.mark("reply-3")) == {
        "event": "mark", "streamSid": SID, "mark": {"name": "reply-3"}
    }  # fmt: skip
    assert json.loads(stream.clear()) == {"event": "clear", "streamSid": SID}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        (json.dumps({"event": "media", "media": {"payload": "AAAA"}}), "before start"),
        ("x" * (MAX_MESSAGE + 1), "over"),
    ],
)
def test_bad_messages_before_the_start_are_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(StreamProtocolError, match=reason):
        TwilioStream().parse(text)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ({**START}, "a second start"),
        ({"event": "media", "streamSid": SID, "media": {"payload": "%%%"}}, "not base64"),
        ({"event": "dtmf", "streamSid": SID, "dtmf": {"digit": "12"}}, "not a DTMF digit"),
        ({"event": "mark", "streamSid": SID}, "without mark.name"),
        ({"event": "hangup", "streamSid": SID}, "unknown event"),
    ],
)
def test_bad_messages_in_a_call_are_refused_with_a_reason(message: dict, reason: str) -> None:
    with pytest.raises(StreamProtocolError, match=reason):
        started().parse(json.dumps(message))


def test_a_stream_in_another_format_is_refused() -> None:
    start = json.loads(json.dumps(START))
    start["start"]["mediaFormat"] = {"encoding": "audio/l16", "sampleRate": 16000}
    with pytest.raises(StreamProtocolError, match="unsupported media format"):
        TwilioStream().parse(json.dumps(start))
    with pytest.raises(StreamProtocolError, match="before start"):
        TwilioStream().clear()
