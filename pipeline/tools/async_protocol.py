"""The async-tool message protocol (wire-compatible with Pipecat's).

A tool that must not be cancelled by an interruption runs as an async task. The context
gets a ``started`` message at once (``role="tool"``, answering the tool call), then zero
or more ``intermediate`` results and one ``final`` result (``role="developer"``). Each
content is a JSON string with ``type="async_tool"``, ``status``, ``tool_call_id``,
``description`` and, once there is one, ``result``. :class:`AsyncToolPayload` is the
canonical form; the JSON is always derived from it, never stored, so they cannot drift.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_core import to_jsonable_python

from pipeline.context.llm_context import TOOL_COMPLETED
from pipeline.messages import BaseMessage, DeveloperMessage, ToolMessage

AsyncToolKind = Literal["started", "intermediate", "final"]

PAYLOAD_TYPE = "async_tool"
STATUS_RUNNING = "running"
STATUS_FINISHED = "finished"

# The descriptions are part of the protocol: they tell a model reading the context what
# the message means without any out-of-band knowledge.
STARTED_DESCRIPTION = (
    "An asynchronous task associated with this tool_call_id has started "
    "running. Expect results to arrive later as developer messages that look "
    "roughly like this one (with 'type=async_tool' and a matching tool_call_id) "
    "but with a 'result' field. Note that there *may* be more than one result "
    "(i.e., a stream of results), but there doesn't have to be (there may be "
    "only one). The last result will come in a message with 'status=finished'."
)
INTERMEDIATE_DESCRIPTION = (
    "This is an intermediate result for the asynchronous task associated with "
    "this tool_call_id. The task is still running. More intermediate results "
    "may follow, or the next result may be the final one with "
    "'status=finished'."
)
FINAL_DESCRIPTION = (
    "This is the final result for the asynchronous task associated with this "
    "tool_call_id. The task has completed. No further results will arrive for "
    "this tool_call_id."
)


@dataclass(frozen=True)
class AsyncToolPayload:
    """One async-tool message, decoded."""

    kind: AsyncToolKind
    tool_call_id: str
    status: str
    description: str
    result: str | None = None

    def to_json(self) -> str:
        """The wire content; ``result`` is left out until there is one."""
        obj: dict[str, Any] = {
            "type": PAYLOAD_TYPE,
            "status": self.status,
            "tool_call_id": self.tool_call_id,
            "description": self.description,
        }
        if self.result is not None:
            obj["result"] = self.result
        return json.dumps(obj, default=_jsonable)


def build_started_message(tool_call_id: str) -> ToolMessage:
    """The message to add as soon as an async tool starts running. It answers the tool
    call, so it sits with the other tool results; later results are developer messages
    that carry the id only inside the payload."""
    payload = AsyncToolPayload("started", tool_call_id, STATUS_RUNNING, STARTED_DESCRIPTION)
    return ToolMessage(tool_call_id=tool_call_id, content=payload.to_json())


def build_intermediate_result_message(tool_call_id: str, result: str) -> DeveloperMessage:
    """An intermediate result; ``result`` is already JSON-encoded."""
    payload = AsyncToolPayload(
        "intermediate", tool_call_id, STATUS_RUNNING, INTERMEDIATE_DESCRIPTION, result
    )
    return DeveloperMessage(payload.to_json())


def build_final_result_message(tool_call_id: str, result: str) -> DeveloperMessage:
    """The final result; ``result`` is JSON-encoded, or ``"COMPLETED"`` (see
    :func:`encode_result`). Nothing more arrives for this call afterwards."""
    payload = AsyncToolPayload("final", tool_call_id, STATUS_FINISHED, FINAL_DESCRIPTION, result)
    return DeveloperMessage(payload.to_json())


def encode_result(value: Any) -> str:
    """A function's return value as a result string: JSON, or ``"COMPLETED"`` when it
    returned nothing (the same convention as synchronous tool calls)."""
    return encode_json(value) if value else TOOL_COMPLETED


def encode_json(value: Any) -> str:
    """``value`` as JSON; what JSON has no type for (a pydantic model, a dataclass, a
    datetime, a set) as pydantic would encode it, else as its ``str``: a tool's return
    value must reach the LLM whatever its type, never stall the turn."""
    return json.dumps(value, ensure_ascii=False, default=_jsonable)


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value, fallback=str)


def parse_message(message: BaseMessage | Mapping[str, Any]) -> AsyncToolPayload | None:
    """The async-tool payload a message carries, or None if it is not one.

    As lenient as the reference's parser, so that whatever it reads Parley reads too: a
    ``tool`` or ``developer`` message whose content is a JSON object with
    ``type="async_tool"``, a string ``tool_call_id`` and a known ``status``. A
    ``description`` that is not a string reads as ``""``, a ``result`` that is not a
    string as none; the kind follows from the result (none: ``started``) and the status.
    """
    role, content = _role_content(message)
    if role not in ("tool", "developer") or not isinstance(content, str):
        return None
    try:
        payload = json.loads(content)
    except ValueError:
        return None
    if not isinstance(payload, dict) or payload.get("type") != PAYLOAD_TYPE:
        return None
    tool_call_id = payload.get("tool_call_id")
    status = payload.get("status")
    if not isinstance(tool_call_id, str) or status not in (STATUS_RUNNING, STATUS_FINISHED):
        return None
    description = payload.get("description", "")
    if not isinstance(description, str):
        description = ""
    result = payload.get("result")
    if not isinstance(result, str):
        result = None
    kind: AsyncToolKind
    if result is None:
        kind = "started"
    else:
        kind = "final" if status == STATUS_FINISHED else "intermediate"
    return AsyncToolPayload(kind, tool_call_id, status, description, result)


def _role_content(message: BaseMessage | Mapping[str, Any]) -> tuple[Any, Any]:
    """``(role, content)`` of a typed message or a plain dict."""
    if isinstance(message, ToolMessage):
        return "tool", message.content
    if isinstance(message, DeveloperMessage):
        return "developer", message.content
    if isinstance(message, Mapping):
        return message.get("role"), message.get("content")
    return None, None
