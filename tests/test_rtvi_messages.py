"""The server → client message models: building leaves out what was not set, and
validation refuses what does not fit the protocol."""

from __future__ import annotations

from typing import Any

import pytest

from server.rtvi import protocol, server_messages
from server.rtvi.server_messages import (
    SERVER_MESSAGES,
    FunctionCallInProgressData,
    TextData,
    build,
    validate,
)


def test_every_type_of_the_reference_is_in_the_table() -> None:
    reference = {
        "bot-ready", "server-response", "error-response", "error", "server-message",
        "system-log", "metrics", "bot-llm-text", "bot-tts-text", "bot-transcription",
        "bot-output", "user-llm-text", "user-transcription", "user-audio-level",
        "bot-audio-level", "bot-tts-audio", "llm-function-call-started",
        "llm-function-call-in-progress", "llm-function-call-stopped", "llm-function-call",
        "bot-llm-started", "bot-llm-stopped", "bot-tts-started", "bot-tts-stopped",
        "bot-started-speaking", "bot-stopped-speaking", "user-started-speaking",
        "user-stopped-speaking", "user-mute-started", "user-mute-stopped", "bot-interrupted",
        "ui-command", "ui-job-group",
    }  # fmt: skip
    assert reference <= set(SERVER_MESSAGES)


def test_build_leaves_out_fields_that_were_not_set() -> None:
    msg = build("llm-function-call-in-progress", FunctionCallInProgressData(tool_call_id="c"))
    assert msg == {
        "label": "rtvi-ai",
        "type": "llm-function-call-in-progress",
        "data": {"tool_call_id": "c"},
    }
    assert validate(msg).function_name is None
    assert build("bot-llm-started") == {"label": "rtvi-ai", "type": "bot-llm-started"}
    assert build("server-message", [1, None]) == {
        "label": "rtvi-ai",
        "type": "server-message",
        "data": [1, None],
    }


def test_the_protocol_builders_validate() -> None:
    for msg in (
        protocol.bot_ready("1", {"library": "parley"}),
        protocol.error("x", fatal=True),
        protocol.error_response("2", "no"),
        protocol.server_response("3", "echo", None),
        build("system-log", TextData(text="INFO server: hi")),
    ):
        validate(msg)


@pytest.mark.parametrize(
    "msg",
    [
        None,
        {"label": "other", "type": "error", "data": {"error": "x", "fatal": False}},
        {"label": "rtvi-ai", "type": "bot-dances"},
        {"label": "rtvi-ai", "type": "bot-ready", "data": {"version": "1.4.0"}},  # no id
        {"label": "rtvi-ai", "type": "error", "data": {"error": "x"}},  # no fatal
        {"label": "rtvi-ai", "type": "bot-llm-started", "data": {}},  # has no data
        {"label": "rtvi-ai", "type": "bot-output", "data": {"text": "x", "spoken": True}},
        {"label": "rtvi-ai", "type": "bot-llm-text", "data": {"text": "x", "extra": 1}},
        {"label": "rtvi-ai", "type": "user-audio-level", "data": {"value": 1.5}},
        {"label": "rtvi-ai", "type": "metrics", "data": {"ttfb": [{"value": 1}]}},
        {"label": "rtvi-ai", "type": "llm-function-call-stopped", "data": {"tool_call_id": "c"}},
        {"label": "rtvi-ai", "type": "bot-tts-text", "data": {"text": "x"}, "extra": 1},
    ],
)
def test_validation_refuses_what_does_not_fit(msg: Any) -> None:
    with pytest.raises(ValueError):
        server_messages.validate(msg)
