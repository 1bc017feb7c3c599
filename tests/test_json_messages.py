"""What the providers' dialects read strictly (server/telephony/json_messages.py), as a
hostile client would send it: JSON nested past any parser's stack, digits that are not
ASCII, ids of any length or type, and media far longer than the provider ever sends,
which is dropped before it is decoded."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from server.telephony.detect import ProviderDetector
from server.telephony.exotel import ExotelStream
from server.telephony.json_messages import MAX_ID, load, number
from server.telephony.stream_events import StreamAudio, StreamProtocolError, StreamStarted
from server.telephony.twilio import TwilioStream
from server.telephony.vonage import VonageStream

MULAW = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}


def twilio_start(call_sid: Any = "CA" + "0" * 32) -> str:
    return json.dumps({"event": "start", "streamSid": "MZ1",
                       "start": {"streamSid": "MZ1", "callSid": call_sid,
                                 "mediaFormat": MULAW}})  # fmt: skip


def media(payload: bytes) -> str:
    body = {"track": "inbound", "payload": base64.b64encode(payload).decode()}
    return json.dumps({"event": "media", "streamSid": "MZ1", "media": body})


@pytest.mark.parametrize("text", ["[" * 30_000 + "]" * 30_000, '{"event": NaN}', "[1e999999]"])
def test_json_no_parser_should_take_is_a_protocol_error(text: str) -> None:
    """Deep nesting used to raise RecursionError, past the route's except."""
    if "e999999" in text:  # a float out of range is still JSON: it is just not an object
        with pytest.raises(StreamProtocolError, match="object"):
            load(text, "twilio")
        return
    with pytest.raises(StreamProtocolError, match="not JSON"):
        load(text, "twilio")
    with pytest.raises(StreamProtocolError):
        ProviderDetector().feed(text)
    with pytest.raises(StreamProtocolError):
        TwilioStream().parse(text)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("8000", 8000), (16000, 16000), ("²", None), ("٣", None), ("1" * 7, None), (True, None),
     ("", None), ("-1", None), ("8000.0", None), (-5, None)],
)  # fmt: skip
def test_numbers_are_ascii_digits_of_bounded_length(value: object, expected: int | None) -> None:
    assert number(value, 6) == expected


def test_an_exotel_rate_in_superscript_digits_is_refused_not_raised() -> None:
    start = {"event": "start", "stream_sid": "s1", "start": {
        "stream_sid": "s1", "call_sid": "c1",
        "media_format": {"encoding": "base64", "sample_rate": "²"}}}  # fmt: skip
    with pytest.raises(StreamProtocolError, match="unsupported media format"):
        ExotelStream().parse(json.dumps(start))


@pytest.mark.parametrize("call_sid", ["CA" + "x" * MAX_ID, "CA 1", {"deep": ["x"]}, 34, "CA\x00"])
def test_a_call_id_is_printable_ascii_of_bounded_length(call_sid: object) -> None:
    with pytest.raises(StreamProtocolError, match="callSid"):
        TwilioStream().parse(twilio_start(call_sid))
    assert isinstance(TwilioStream().parse(twilio_start("CA" + "x" * (MAX_ID - 2))), StreamStarted)


def test_media_longer_than_the_providers_own_is_dropped_before_decoding() -> None:
    stream = TwilioStream()
    stream.parse(twilio_start())
    assert isinstance(stream.parse(media(b"\xff" * 160)), StreamAudio)  # Twilio's 20 ms
    assert isinstance(stream.parse(media(b"\xff" * 800)), StreamAudio)  # 100 ms: slack
    assert stream.parse(media(b"\xff" * 48_000)) is None  # 6 s in one message
    assert stream.parse(media(b"\xff" * 801)) is None
    assert stream.oversized == 2


def test_exotel_may_send_half_a_second_and_vonage_a_tenth_then_dropped() -> None:
    exotel = ExotelStream()
    exotel.parse(json.dumps({"event": "start", "stream_sid": "s1", "start": {
        "stream_sid": "s1", "call_sid": "c1",
        "media_format": {"encoding": "base64", "sample_rate": "16000"}}}))  # fmt: skip
    body = {"event": "media", "stream_sid": "s1", "media": {}}
    for size, kept in ((16_000, True), (16_002, False)):
        body["media"] = {"payload": base64.b64encode(bytes(size)).decode()}
        assert isinstance(exotel.parse(json.dumps(body)), StreamAudio) is kept
    assert exotel.oversized == 1
    vonage = VonageStream()
    vonage.parse(
        json.dumps({"event": "websocket:connected", "content-type": "audio/l16;rate=16000"})
    )
    assert isinstance(vonage.parse(bytes(3200)), StreamAudio)
    assert vonage.parse(bytes(3202)) is None and vonage.oversized == 1
