"""Exotel AgentStream (Voicebot applet) messages (server/telephony/exotel.py), as Exotel's
WebSocket protocol shows them: linear PCM at the stream's rate both ways, keys, marks, the
end; what goes back comes in whole 320-byte chunks."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from server.telephony.exotel import CHUNK, ExotelStream
from server.telephony.stream_events import (
    StreamAudio,
    StreamDtmf,
    StreamMarkPlayed,
    StreamProtocolError,
    StreamStarted,
    StreamStopped,
)

SID = "MZ0123456789abcdef0123456789abcd"
CALL = "CA0123456789abcdef0123456789abcd"


def start_message(rate: object = "8000", encoding: str = "audio/x-raw") -> dict:
    return {
        "event": "start",
        "sequence_number": "1",
        "stream_sid": SID,
        "start": {
            "stream_sid": SID,
            "call_sid": CALL,
            "account_sid": "AC0123456789",
            "from": "+919876543210",
            "to": "+918047491899",
            "custom_parameters": {"key1": "value1"},
            "media_format": {"encoding": encoding, "sample_rate": rate, "bit_rate": "16"},
        },
    }


def media(pcm: np.ndarray, n: int = 2) -> str:
    body = {"chunk": str(n), "timestamp": str(100 * n),
            "payload": base64.b64encode(pcm.astype("<i2").tobytes()).decode()}  # fmt: skip
    return json.dumps({"event": "media", "sequence_number": str(n + 1), "stream_sid": SID,
                       "media": body})  # fmt: skip


def started(rate: str = "8000") -> ExotelStream:
    stream = ExotelStream()
    assert stream.parse(json.dumps({"event": "connected"})) is None
    assert isinstance(stream.parse(json.dumps(start_message(rate))), StreamStarted)
    return stream


def sine(rate: int, seconds: float = 1.0, amplitude: int = 6000) -> np.ndarray:
    return (amplitude * np.sin(2 * np.pi * 300 * np.arange(int(rate * seconds)) / rate)).astype(
        np.int16
    )


def test_the_start_gives_the_call_its_rate_and_custom_parameters() -> None:
    assert ExotelStream().parse(json.dumps(start_message("16000"))) == StreamStarted(
        stream_id=SID, call_id=CALL, encoding="pcm", sample_rate=16000,
        parameters={"key1": "value1"},
    )  # fmt: skip
    # Older streams say "base64" and give the rate as a number.
    legacy = ExotelStream().parse(json.dumps(start_message(8000, "base64")))
    assert isinstance(legacy, StreamStarted) and legacy.sample_rate == 8000


@pytest.mark.parametrize("rate", [8000, 16000, 24000])
def test_media_is_the_callers_voice_at_16_khz(rate: int) -> None:
    stream, tone = started(str(rate)), sine(rate)
    step = rate // 10  # Exotel sends about 100 ms a message
    events = [stream.parse(media(tone[i : i + step], i)) for i in range(0, tone.size, step)]
    pcm = np.frombuffer(b"".join(e.pcm for e in events if isinstance(e, StreamAudio)), np.int16)
    assert len(events) == 10 and 0.98 * 16000 <= pcm.size <= 16000
    assert 3900 < np.sqrt(np.mean(pcm[2000:].astype(np.float64) ** 2)) < 4600  # 6000/√2
    if rate == 16000:  # already our rate: untouched
        assert np.array_equal(pcm, tone)


def test_keys_marks_and_the_end() -> None:
    stream = started()
    dtmf = {"event": "dtmf", "sequence_number": "7", "stream_sid": SID,
            "dtmf": {"digit": "5", "duration": "100"}}  # fmt: skip
    mark = {"event": "mark", "sequence_number": "15", "stream_sid": SID,
            "mark": {"name": "reply-3"}}  # fmt: skip
    stop = {"event": "stop", "sequence_number": "20", "stream_sid": SID,
            "stop": {"call_sid": CALL, "account_sid": "AC01", "reason": "callended"}}  # fmt: skip
    assert stream.parse(json.dumps(dtmf)) == StreamDtmf("5")
    assert stream.parse(json.dumps(mark)) == StreamMarkPlayed("reply-3")
    assert stream.parse(json.dumps(stop)) == StreamStopped()


@pytest.mark.parametrize(("rate", "step"), [("8000", 320), ("8000", 1600), ("16000", 320)])
def test_what_goes_back_is_pcm_at_the_streams_rate_in_whole_chunks(rate: str, step: int) -> None:
    stream, tone = started(rate), sine(16000)
    sent = [json.loads(stream.media(tone[i : i + step].tobytes(), 16000))
            for i in range(0, tone.size, step)]  # fmt: skip
    assert {(m["event"], m["stream_sid"]) for m in sent} == {("media", SID)}
    chunks = [base64.b64decode(m["media"]["payload"]) for m in sent]
    assert all(c and len(c) % CHUNK == 0 for c in chunks)
    back = np.frombuffer(b"".join(chunks), "<i2")
    assert abs(back.size - int(rate)) <= CHUNK // 2  # one second at the stream's rate
    assert 3900 < np.sqrt(np.mean(back[2000:].astype(np.float64) ** 2)) < 4600


def test_marks_and_clear_name_the_stream() -> None:
    stream = started()
    assert json.loads(stream.mark("reply-3")) == {
        "event": "mark", "stream_sid": SID, "mark": {"name": "reply-3"}
    }  # fmt: skip
    assert json.loads(stream.clear()) == {"event": "clear", "stream_sid": SID}


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (bytes(320), "text messages only"),
        ("null", "JSON object"),
        (media(np.zeros(800, np.int16)), "before start"),
        (json.dumps(start_message("8000", "audio/x-mulaw")), "unsupported media format"),
        (json.dumps(start_message("44100")), "unsupported media format"),
        (json.dumps(start_message("8k")), "unsupported media format"),
        (json.dumps(start_message(["8000"], ["audio/x-raw"])), "unsupported media format"),
        (
            json.dumps(
                {
                    "event": "start",
                    "start": {
                        "call_sid": CALL,
                        "media_format": {"encoding": "audio/x-raw", "sample_rate": "8000"},
                    },
                }
            ),
            "without a stream_sid",
        ),
    ],
)
def test_bad_messages_before_the_start_are_refused_with_a_reason(
    message: str | bytes, reason: str
) -> None:
    with pytest.raises(StreamProtocolError, match=reason):
        ExotelStream().parse(message)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (start_message(), "a second start"),
        (
            {
                "event": "media",
                "stream_sid": SID,
                "media": {"payload": base64.b64encode(bytes(3)).decode()},
            },
            "not 16-bit",
        ),
        ({"event": "media", "stream_sid": SID, "media": {"payload": "not base64!"}}, "not base64"),
        ({"event": "dtmf", "stream_sid": SID, "dtmf": {"digit": ""}}, "not a DTMF digit"),
        ({"event": "mark", "stream_sid": SID, "mark": "reply-3"}, "without mark.name"),
        ({"event": "clear", "stream_sid": SID}, "unknown event"),
    ],
)
def test_bad_messages_in_a_call_are_refused_with_a_reason(message: dict, reason: str) -> None:
    with pytest.raises(StreamProtocolError, match=reason):
        started().parse(json.dumps(message))


def test_nothing_goes_back_before_the_start() -> None:
    with pytest.raises(StreamProtocolError, match="before start"):
        ExotelStream().media(bytes(640), 16000)
    with pytest.raises(StreamProtocolError, match="before start"):
        ExotelStream().clear()
