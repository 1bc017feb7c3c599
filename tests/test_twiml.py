"""The TwiML that connects a call to our stream (server/telephony/twiml.py): a document an
XML parser reads back exactly, whatever the parameters hold, and a stream URL without a
query string (the token rides as a <Parameter>)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from server.telephony.twiml import (
    STREAM_PATH,
    TOKEN_PARAMETER,
    TwimlError,
    connect_stream_twiml,
    stream_twiml,
    stream_url,
)

URL = "wss://agent.example.com/telephony/ws"


def parse(document: str) -> ET.Element:
    assert document.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    return ET.fromstring(document.encode("utf-8"))


def test_the_document_connects_the_call_to_the_stream() -> None:
    root = parse(connect_stream_twiml(URL, {"caller": "+15555550100", "agent": "support"}))
    assert root.tag == "Response" and [child.tag for child in root] == ["Connect"]
    (connect,) = root
    (stream,) = connect
    assert stream.tag == "Stream" and stream.attrib == {"url": URL}
    assert [(p.tag, p.attrib) for p in stream] == [
        ("Parameter", {"name": "caller", "value": "+15555550100"}),
        ("Parameter", {"name": "agent", "value": "support"}),
    ]
    assert list(parse(connect_stream_twiml(URL, {})).iter("Parameter")) == []


@pytest.mark.parametrize(
    "value",
    ['"/><Hangup/><Stream url="wss://evil.example/', "a & b < c > d ' e \"",
     "line\nbreak\ttab\r", "Zoë 😀 日本", "]]>", "&amp;"],
)  # fmt: skip
def test_any_text_is_escaped_and_read_back_exactly(value: str) -> None:
    document = connect_stream_twiml(URL, {value: value, "after": "x"})
    root = parse(document)
    assert [element.tag for element in root.iter()] == [
        "Response", "Connect", "Stream", "Parameter", "Parameter",
    ]  # fmt: skip
    first, second = root.iter("Parameter")
    assert first.attrib == {"name": value, "value": value}
    assert second.attrib == {"name": "after", "value": "x"}


@pytest.mark.parametrize("value", ["nul\x00", "bell\x07", "esc\x1b", "\ufffe"])
def test_what_xml_cannot_carry_is_refused(value: str) -> None:
    with pytest.raises(TwimlError, match="cannot appear in XML"):
        connect_stream_twiml(URL, {"name": value})
    with pytest.raises(TwimlError):
        connect_stream_twiml(URL, {value: "x"})


@pytest.mark.parametrize(
    "url",
    ["https://agent.example.com/ws", "wss://agent.example.com/ws?token=abc",
     "wss://agent.example.com/ws#x", "wss:///ws", "agent.example.com/ws"],
)  # fmt: skip
def test_stream_urls_twilio_would_not_open_are_refused(url: str) -> None:
    with pytest.raises(TwimlError):
        connect_stream_twiml(url, {})


@pytest.mark.parametrize(
    ("public", "expected"),
    [
        ("https://agent.example.com", "wss://agent.example.com/telephony/ws"),
        ("https://agent.example.com/", "wss://agent.example.com/telephony/ws"),
        (
            "https://agent.example.com:8443/voice/",
            "wss://agent.example.com:8443/voice/telephony/ws",
        ),
        ("http://127.0.0.1:7860", "ws://127.0.0.1:7860/telephony/ws"),
    ],
)
def test_the_stream_url_follows_the_public_url(public: str, expected: str) -> None:
    assert stream_url(public) == expected and expected.endswith(STREAM_PATH)


@pytest.mark.parametrize("public", ["", "ftp://x.example", "https://", "https://x.example/?a=1"])
def test_public_urls_that_make_no_stream_url_are_refused(public: str) -> None:
    with pytest.raises(TwimlError):
        stream_url(public)


def test_the_token_is_a_parameter_never_in_the_url() -> None:
    token = "Q0E.1700000060000.abc-_"
    root = parse(stream_twiml("https://agent.example.com/p", token, {"from": "+15555550100"}))
    (stream,) = root.iter("Stream")
    assert stream.get("url") == "wss://agent.example.com/p/telephony/ws"
    assert [(p.get("name"), p.get("value")) for p in stream] == [
        (TOKEN_PARAMETER, token), ("from", "+15555550100"),
    ]  # fmt: skip
    with pytest.raises(TwimlError, match="token"):
        stream_twiml("https://agent.example.com", token, {TOKEN_PARAMETER: "mine"})
