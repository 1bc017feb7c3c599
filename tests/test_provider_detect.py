"""Telling the providers apart from a stream's first messages (server/telephony/detect.py):
each provider's real opening picks its class, whose parse then takes the deciding message;
a ?provider= name picks directly; anything no provider would open with is refused."""

from __future__ import annotations

import json

import pytest

from server.telephony.detect import MAX_UNDECIDED, PROVIDERS, ProviderDetector, stream_for
from server.telephony.exotel import ExotelStream
from server.telephony.plivo import PlivoStream
from server.telephony.stream_events import StreamProtocolError, StreamStarted
from server.telephony.telnyx import TelnyxStream
from server.telephony.twilio import TwilioStream
from server.telephony.vonage import VonageStream

OPENINGS = {
    TwilioStream: [
        {"event": "connected", "protocol": "Call", "version": "1.0.0"},
        {"event": "start", "sequenceNumber": "1", "streamSid": "MZ1",
         "start": {"accountSid": "AC1", "streamSid": "MZ1", "callSid": "CA1", "tracks": ["inbound"],
                   "customParameters": {}, "mediaFormat": {"encoding": "audio/x-mulaw",
                                                           "sampleRate": 8000, "channels": 1}}},
    ],
    TelnyxStream: [
        {"event": "connected", "version": "1.0.0"},
        {"event": "start", "sequence_number": "1", "stream_id": "32DE0DEA",
         "start": {"user_id": "3E6F995F", "call_control_id": "v2:T02", "from": "+13122010094",
                   "to": "+13122123456", "custom_parameters": {},
                   "media_format": {"encoding": "PCMA", "sample_rate": 8000, "channels": 1}}},
    ],
    PlivoStream: [
        {"event": "start", "sequenceNumber": 1, "extra_headers": "",
         "start": {"callId": "1234", "streamId": "8765", "accountId": "MA1", "tracks": ["inbound"],
                   "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000}}},
    ],
    ExotelStream: [
        {"event": "connected"},
        {"event": "start", "sequence_number": "1", "stream_sid": "MZx",
         "start": {"stream_sid": "MZx", "call_sid": "CAx", "account_sid": "ACx", "from": "+91",
                   "to": "+91", "custom_parameters": {},
                   "media_format": {"encoding": "audio/x-raw", "sample_rate": "8000",
                                    "bit_rate": "16"}}},
    ],
    VonageStream: [
        {"event": "websocket:connected", "content-type": "audio/l16;rate=16000", "app": "demo"},
    ],
}  # fmt: skip


@pytest.mark.parametrize("kind", list(OPENINGS), ids=lambda kind: kind.provider)
def test_each_providers_opening_picks_its_stream(kind: type) -> None:
    detector, *before, deciding = ProviderDetector(), *OPENINGS[kind]
    assert all(detector.feed(json.dumps(m)) is None for m in before)
    stream = detector.feed(json.dumps(deciding))
    assert isinstance(stream, kind) and detector.stream is stream
    assert isinstance(stream.parse(json.dumps(deciding)), StreamStarted)
    assert detector.feed("whatever comes next") is stream  # decided once


def test_a_provider_named_in_the_query_is_taken_at_its_word() -> None:
    assert set(PROVIDERS) == {"twilio", "telnyx", "plivo", "exotel", "vonage"}
    for name, kind in PROVIDERS.items():
        stream = stream_for(name)
        assert isinstance(stream, kind) and stream.provider == name and stream.stream_id is None
    assert stream_for("twilio") is not stream_for("twilio")  # one per call
    with pytest.raises(StreamProtocolError, match="unknown provider 'sinch': one of twilio"):
        stream_for("sinch")


def test_the_chosen_stream_checks_the_format_itself() -> None:
    start = json.loads(json.dumps(OPENINGS[TwilioStream][1]))
    start["start"]["mediaFormat"]["encoding"] = "audio/l16"
    stream = ProviderDetector().feed(json.dumps(start))
    assert isinstance(stream, TwilioStream)
    with pytest.raises(StreamProtocolError, match="unsupported media format"):
        stream.parse(json.dumps(start))


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (b"\x00" * 640, "binary message before the provider is known"),
        ("hello", "not JSON"),
        ("[1]", "JSON object"),
        (json.dumps({"hello": "world"}), "without its 'event' name"),
        (json.dumps({"event": "media", "media": {"payload": ""}}), "'media' before the provider"),
        (json.dumps({"event": "start", "start": "MZ1"}), "'start' before the provider"),
        (json.dumps({"event": "start", "start": {"id": "1", "call": "2"}}),
         r"a start no provider sends \(its fields: \['call', 'id'\]\)"),
        (json.dumps({"event": "start", "stream_id": "S", "start": {
            "streamSid": "MZ1", "callSid": "CA1", "call_control_id": "v2"}}),
         "fits twilio and telnyx at once"),
    ],
)  # fmt: skip
def test_what_no_provider_opens_with_is_refused(message: str | bytes, reason: str) -> None:
    with pytest.raises(StreamProtocolError, match=reason):
        ProviderDetector().feed(message)


def test_connected_forever_is_refused() -> None:
    detector = ProviderDetector()
    for _ in range(MAX_UNDECIDED - 1):
        assert detector.feed(json.dumps({"event": "connected"})) is None
    with pytest.raises(StreamProtocolError, match=f"no start in the first {MAX_UNDECIDED}"):
        detector.feed(json.dumps({"event": "connected"}))
