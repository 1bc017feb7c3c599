"""RTVI models: envelope and data validation, version handling, message shapes."""

from __future__ import annotations

import pytest

from server.rtvi import protocol
from server.rtvi.protocol import (
    MAX_ABOUT_CHARS,
    ClientMessageData,
    ClientReadyData,
    RTVIError,
    SendTextData,
)


def test_valid_client_message_parses() -> None:
    env = protocol.parse_envelope(
        {"label": "rtvi-ai", "type": "client-message", "id": "7", "data": {"t": "a", "d": [1]}}
    )
    data = protocol.parse_data(env)
    assert isinstance(data, ClientMessageData) and data.t == "a" and data.d == [1]


def test_send_text_options_default_to_true() -> None:
    env = protocol.parse_envelope(
        {"label": "rtvi-ai", "type": "send-text", "id": "1", "data": {"content": "hi"}}
    )
    data = protocol.parse_data(env)
    assert isinstance(data, SendTextData) and data.content == "hi" and data.options is None


@pytest.mark.parametrize(
    ("raw", "msg_id", "text"),
    [
        (None, None, "JSON object"),
        ({"label": "other", "type": "x", "id": "1"}, "1", "label"),
        ({"label": "rtvi-ai", "type": "x"}, None, "id"),
        ({"label": "rtvi-ai", "type": "x", "id": 5}, None, "id"),
        ({"label": "rtvi-ai", "type": "x", "id": "1", "data": [1]}, "1", "data"),
    ],
)
def test_bad_envelopes(raw: object, msg_id: str | None, text: str) -> None:
    with pytest.raises(RTVIError) as caught:
        protocol.parse_envelope(raw)
    assert caught.value.msg_id == msg_id
    assert text in caught.value.error


def test_unknown_type_keeps_the_id() -> None:
    env = protocol.parse_envelope({"label": "rtvi-ai", "type": "dance", "id": "9"})
    with pytest.raises(RTVIError) as caught:
        protocol.parse_data(env)
    assert caught.value.msg_id == "9"
    assert "unknown message type" in caught.value.error


@pytest.mark.parametrize(
    ("version", "major"), [("2.1.0", 2), ("1.0", 1), ("10", 10), ("x.1", None), (None, None)]
)
def test_version_major(version: str | None, major: int | None) -> None:
    assert protocol.version_major(version) == major


def test_message_shapes() -> None:
    assert protocol.bot_ready("5", {"library": "parley"}) == {
        "label": "rtvi-ai",
        "type": "bot-ready",
        "id": "5",
        "data": {"version": protocol.PROTOCOL_VERSION, "about": {"library": "parley"}},
    }
    assert protocol.error("boom") == {
        "label": "rtvi-ai",
        "type": "error",
        "data": {"error": "boom", "fatal": False},
    }
    assert protocol.server_response("3", "echo", 1)["data"] == {"t": "echo", "d": 1}
    assert protocol.error_response("4", "no")["id"] == "4"


def test_what_a_client_says_about_itself_is_cut_short() -> None:
    """It is listed to every caller of GET /api/sessions: never 64 KB of it."""
    long = "x" * 10_000
    env = protocol.parse_envelope(
        {
            "label": "rtvi-ai",
            "type": "client-ready",
            "id": "1",
            "data": {"version": long, "about": {"library": long, "platform": long, "n": long}},
        }
    )
    data = protocol.parse_data(env)
    assert isinstance(data, ClientReadyData) and data.about is not None
    assert data.version == data.about.library == data.about.platform == "x" * MAX_ABOUT_CHARS
    assert data.about.model_extra is None, "the rest is not kept"


def test_an_error_names_its_kind_without_the_particulars() -> None:
    assert RTVIError("message too large: 70000 bytes (limit 65536)").reason == "message too large"
    assert RTVIError("no handler for client-message 'x'", "1", "no handler").reason == "no handler"
