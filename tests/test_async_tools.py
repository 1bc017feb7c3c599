"""The async-tool message protocol: exact payloads, round trips, and rejection of the rest."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pipeline.context.openai_messages import to_openai
from pipeline.messages import (
    AssistantMessage,
    CustomMessage,
    DeveloperMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from pipeline.tools import async_protocol as async_tools
from pipeline.tools.async_protocol import AsyncToolPayload

STARTED_TEXT = (
    "An asynchronous task associated with this tool_call_id has started running. "
    "Expect results to arrive later as developer messages that look roughly like this one "
    "(with 'type=async_tool' and a matching tool_call_id) but with a 'result' field. "
    "Note that there *may* be more than one result (i.e., a stream of results), but there "
    "doesn't have to be (there may be only one). "
    "The last result will come in a message with 'status=finished'."
)
INTERMEDIATE_TEXT = (
    "This is an intermediate result for the asynchronous task associated with this "
    "tool_call_id. The task is still running. More intermediate results may follow, or the "
    "next result may be the final one with 'status=finished'."
)
FINAL_TEXT = (
    "This is the final result for the asynchronous task associated with this tool_call_id. "
    "The task has completed. No further results will arrive for this tool_call_id."
)


def test_started_message_is_a_tool_message_with_the_exact_payload() -> None:
    message = async_tools.build_started_message("call_7")
    assert isinstance(message, ToolMessage)
    wire = to_openai([message])[0]
    assert wire == {"role": "tool", "tool_call_id": "call_7", "content": wire["content"]}
    assert wire["content"] == json.dumps(
        {
            "type": "async_tool",
            "status": "running",
            "tool_call_id": "call_7",
            "description": STARTED_TEXT,
        }
    )


def test_intermediate_message_is_a_developer_message_with_a_result() -> None:
    message = async_tools.build_intermediate_result_message("call_7", '{"progress": 50}')
    assert isinstance(message, DeveloperMessage)
    wire = to_openai([message])[0]
    assert set(wire) == {"role", "content"} and wire["role"] == "developer"
    assert json.loads(wire["content"]) == {
        "type": "async_tool",
        "status": "running",
        "tool_call_id": "call_7",
        "description": INTERMEDIATE_TEXT,
        "result": '{"progress": 50}',
    }


def test_final_message_is_a_developer_message_with_status_finished() -> None:
    message = async_tools.build_final_result_message("call_7", '"done"')
    wire = to_openai([message])[0]
    assert wire["role"] == "developer" and "tool_call_id" not in wire
    assert json.loads(wire["content"]) == {
        "type": "async_tool",
        "status": "finished",
        "tool_call_id": "call_7",
        "description": FINAL_TEXT,
        "result": '"done"',
    }


def test_payload_json_field_order_matches_the_protocol() -> None:
    content = async_tools.build_final_result_message("c", "r").content
    assert list(json.loads(content)) == ["type", "status", "tool_call_id", "description", "result"]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            async_tools.build_started_message("c1"),
            AsyncToolPayload("started", "c1", "running", STARTED_TEXT, None),
        ),
        (
            async_tools.build_intermediate_result_message("c1", "[1]"),
            AsyncToolPayload("intermediate", "c1", "running", INTERMEDIATE_TEXT, "[1]"),
        ),
        (
            async_tools.build_final_result_message("c1", "COMPLETED"),
            AsyncToolPayload("final", "c1", "finished", FINAL_TEXT, "COMPLETED"),
        ),
    ],
    ids=["started", "intermediate", "final"],
)
def test_built_messages_parse_back_typed_and_as_dicts(
    message: ToolMessage | DeveloperMessage, expected: AsyncToolPayload
) -> None:
    assert async_tools.parse_message(message) == expected
    assert async_tools.parse_message(to_openai([message])[0]) == expected


def test_pipecat_aggregator_dicts_parse() -> None:
    # The aggregator writes the same fields inline, in another key order.
    content = json.dumps(
        {
            "type": "async_tool",
            "tool_call_id": "c9",
            "status": "finished",
            "description": "whatever",
            "result": '{"ok": true}',
        }
    )
    parsed = async_tools.parse_message({"role": "developer", "content": content})
    assert parsed == AsyncToolPayload("final", "c9", "finished", "whatever", '{"ok": true}')


def test_a_missing_description_parses_as_empty() -> None:
    content = json.dumps({"type": "async_tool", "status": "running", "tool_call_id": "c"})
    parsed = async_tools.parse_message({"role": "tool", "tool_call_id": "c", "content": content})
    assert parsed == AsyncToolPayload("started", "c", "running", "", None)


def test_encode_result_is_json_or_completed() -> None:
    assert async_tools.encode_result({"city": "Zürich"}) == '{"city": "Zürich"}'
    assert async_tools.encode_result(None) == "COMPLETED"
    assert async_tools.encode_result({}) == "COMPLETED"


def _payload(**changes: Any) -> str:
    fields: dict[str, Any] = {
        "type": "async_tool",
        "status": "finished",
        "tool_call_id": "c",
        "description": "d",
        "result": "r",
    }
    fields.update(changes)
    return json.dumps({k: v for k, v in fields.items() if v is not ...})


def _started(**changes: Any) -> str:
    return _payload(**{"status": "running", "result": ..., **changes})


@pytest.mark.parametrize(
    "message",
    [
        {"role": "developer", "content": "not json"},
        {"role": "developer", "content": "[1, 2]"},
        {"role": "developer", "content": None},
        {"role": "developer"},
        {"role": "developer", "content": _payload(type="sync_tool")},
        {"role": "developer", "content": _payload(type=...)},
        {"role": "developer", "content": _payload(status="done")},
        {"role": "developer", "content": _payload(status=...)},
        {"role": "developer", "content": _payload(tool_call_id=7)},
        {"role": "developer", "content": _payload(tool_call_id=...)},
        {"role": "user", "content": _payload()},
        {"role": "system", "content": _payload()},
        {"role": "assistant", "content": _payload()},
    ],
    ids=[
        "not-json",
        "json-list",
        "null-content",
        "no-content",
        "wrong-type",
        "no-type",
        "bad-status",
        "no-status",
        "int-id",
        "no-id",
        "user-role",
        "system-role",
        "assistant-role",
    ],
)
def test_malformed_dicts_parse_to_none(message: dict[str, Any]) -> None:
    assert async_tools.parse_message(message) is None


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # A result that is not a string reads as none: the payload is a "started" one.
        ({"role": "developer", "content": _payload(result=42)}, ("started", "finished", None)),
        (
            {"role": "developer", "content": _payload(result={"a": 1})},
            ("started", "finished", None),
        ),
        # A description that is not a string reads as "".
        ({"role": "developer", "content": _payload(description=["d"])}, ("final", "finished", "r")),
        # The role need not fit the kind, nor the outer tool_call_id the payload's.
        ({"role": "tool", "tool_call_id": "c", "content": _payload()}, ("final", "finished", "r")),
        ({"role": "developer", "content": _started()}, ("started", "running", None)),
        (
            {"role": "tool", "tool_call_id": "x", "content": _started()},
            ("started", "running", None),
        ),
        ({"role": "tool", "content": _started()}, ("started", "running", None)),
        ({"role": "tool", "content": _started(status="finished")}, ("started", "finished", None)),
        ({"role": "tool", "content": _payload(status="running")}, ("intermediate", "running", "r")),
    ],
    ids=[
        "int-result",
        "dict-result",
        "list-description",
        "result-on-tool-role",
        "started-on-developer-role",
        "started-id-mismatch",
        "started-without-outer-id",
        "started-finished",
        "intermediate-on-tool-role",
    ],
)
def test_payloads_the_reference_parses_parse(
    message: dict[str, Any], expected: tuple[str, str, str | None]
) -> None:
    payload = async_tools.parse_message(message)
    assert payload is not None
    assert (payload.kind, payload.status, payload.result) == expected
    assert payload.tool_call_id == "c"
    assert payload.description in ("d", "")


@pytest.mark.parametrize(
    "message",
    [
        SystemMessage(_payload()),
        UserMessage.text(_payload()),
        AssistantMessage.text(_payload()),
        CustomMessage(custom_type="async_tool", data={"content": _payload()}),
        ToolMessage(tool_call_id="c", content="IN_PROGRESS"),
        DeveloperMessage("plain guidance, not a payload"),
    ],
    ids=["system", "user", "assistant", "custom", "in-progress", "plain-developer"],
)
def test_other_typed_messages_parse_to_none(message: Any) -> None:
    assert async_tools.parse_message(message) is None
