"""RTVI models: envelope and data validation, version handling, message shapes."""

from __future__ import annotations

import pytest

from server import rtvi
from server.rtvi import ClientMessageData, RTVIError, SendTextData


def test_valid_client_message_parses() -> None:
    env = rtvi.parse_envelope(
        {"label": "rtvi-ai", "type": "client-message", "id": "7", "data": {"t": "a", "d": [1]}}
    )
    data = rtvi.parse_data(env)
    assert isinstance(data, ClientMessageData) and data.t == "a" and data.d == [1]


def test_send_text_options_default_to_true() -> None:
    env = rtvi.parse_envelope(
        {"label": "rtvi-ai", "type": "send-text", "id": "1", "data": {"content": "hi"}}
    )
    data = rtvi.parse_data(env)
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
        rtvi.parse_envelope(raw)
    assert caught.value.msg_id == msg_id
    assert text in caught.value.error


def test_unknown_type_keeps_the_id() -> None:
    env = rtvi.parse_envelope({"label": "rtvi-ai", "type": "dance", "id": "9"})
    with pytest.raises(RTVIError) as caught:
        rtvi.parse_data(env)
    assert caught.value.msg_id == "9"
    assert "unknown message type" in caught.value.error


@pytest.mark.parametrize(
    ("version", "major"), [("2.1.0", 2), ("1.0", 1), ("10", 10), ("x.1", None), (None, None)]
)
def test_version_major(version: str | None, major: int | None) -> None:
    assert rtvi.version_major(version) == major


def test_message_shapes() -> None:
    assert rtvi.bot_ready("5", {"library": "parley"}) == {
        "label": "rtvi-ai",
        "type": "bot-ready",
        "id": "5",
        "data": {"version": rtvi.PROTOCOL_VERSION, "about": {"library": "parley"}},
    }
    assert rtvi.error("boom") == {
        "label": "rtvi-ai",
        "type": "error",
        "data": {"error": "boom", "fatal": False},
    }
    assert rtvi.server_response("3", "echo", 1)["data"] == {"t": "echo", "d": 1}
    assert rtvi.error_response("4", "no")["id"] == "4"
