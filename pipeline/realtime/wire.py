"""The OpenAI Realtime wire protocol: the client events Parley sends, and the server
events it reads, with the GA names and the older beta names Azure still sends.

Only this module knows the event names and item shapes; the rest of the realtime service
speaks in :class:`ServerEvent` kinds and the builders below. The GA and beta dialects
differ in a few names (``response.output_audio.delta`` vs ``response.audio.delta``), in
the session's shape (``audio.input.format`` vs ``input_audio_format``) and in the
assistant's text content type (``output_text`` vs ``text``).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Literal

Dialect = Literal["ga", "beta"]

# The API's audio: 16-bit mono PCM at 24 kHz, both ways (the only rate GA accepts).
API_RATE = 24000

# Beta names → GA names; GA names map to themselves by default.
_BETA_NAMES = {
    "response.audio.delta": "response.output_audio.delta",
    "response.audio.done": "response.output_audio.done",
    "response.audio_transcript.delta": "response.output_audio_transcript.delta",
    "response.audio_transcript.done": "response.output_audio_transcript.done",
    "response.text.delta": "response.output_text.delta",
    "response.text.done": "response.output_text.done",
    "conversation.item.created": "conversation.item.added",
}


@dataclass(frozen=True, slots=True)
class ServerEvent:
    """One server event: its GA ``kind`` and its JSON body."""

    kind: str
    body: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default)


def read(message: str | bytes) -> ServerEvent:
    """A server message as a :class:`ServerEvent` (``kind`` "invalid" if it is not one)."""
    try:
        body = json.loads(message)
    except ValueError:
        return ServerEvent("invalid", {"raw": str(message)[:200]})
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        return ServerEvent("invalid", {"raw": str(message)[:200]})
    kind: str = body["type"]
    return ServerEvent(_BETA_NAMES.get(kind, kind), body)


def audio_of(event: ServerEvent) -> bytes:
    """The PCM an audio delta carries (empty if it carries none)."""
    delta = event.get("delta")
    return base64.b64decode(delta) if isinstance(delta, str) else b""


def session_update(
    dialect: Dialect,
    instructions: str,
    tools: list[dict[str, Any]],
    voice: str | None,
    model: str,
    turns: str = "parley",
) -> dict[str, Any]:
    """``session.update``: 24 kHz PCM both ways, the instructions and the tools
    (chat-completions tools flattened to realtime ones), and who takes turns: Parley (no
    server VAD) or the provider's ``server_vad`` / ``semantic_vad``, which then commits
    the caller's audio and starts each response itself. ``voice`` None leaves it out: a
    provider refuses to change the voice once the model has spoken."""
    flat = [realtime_tool(tool) for tool in tools]
    detection = None
    if turns != "parley":
        detection = {"type": turns, "create_response": True, "interrupt_response": True}
    if dialect == "beta":
        session: dict[str, Any] = {
            "modalities": ["audio", "text"],
            "instructions": instructions,
            "voice": voice,
            "input_audio_format": "pcm16",
            "output_audio_format": "pcm16",
            "turn_detection": detection,
            "tools": flat,
        }
        if voice is None:
            del session["voice"]
    else:
        pcm = {"type": "audio/pcm", "rate": API_RATE}
        session = {
            "type": "realtime",
            "model": model,
            "output_modalities": ["audio"],
            "instructions": instructions,
            "audio": {
                "input": {"format": pcm, "turn_detection": detection},
                "output": {"format": pcm, "voice": voice},
            },
            "tools": flat,
        }
        if voice is None:
            del session["audio"]["output"]["voice"]
    return {"type": "session.update", "session": session}


def realtime_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions tool (``{"type": "function", "function": {...}}``) as the
    Realtime API wants it (the function's fields at the top)."""
    function = tool.get("function", tool)
    return {
        "type": "function",
        "name": function.get("name", ""),
        "description": function.get("description", ""),
        "parameters": function.get("parameters") or {"type": "object", "properties": {}},
    }


def append_audio(pcm: bytes) -> dict[str, Any]:
    return {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}


def commit_audio(event_id: str) -> dict[str, Any]:
    return {"type": "input_audio_buffer.commit", "event_id": event_id}


def clear_audio() -> dict[str, Any]:
    return {"type": "input_audio_buffer.clear"}


def create_item(item: dict[str, Any], previous_item_id: str | None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "conversation.item.create", "item": item}
    if previous_item_id is not None:
        event["previous_item_id"] = previous_item_id
    return event


def delete_item(item_id: str) -> dict[str, Any]:
    return {"type": "conversation.item.delete", "item_id": item_id}


def truncate_item(item_id: str, audio_end_ms: int) -> dict[str, Any]:
    return {
        "type": "conversation.item.truncate",
        "item_id": item_id,
        "content_index": 0,
        "audio_end_ms": audio_end_ms,
    }


def create_response(
    dialect: Dialect, tool_choice: Any = None, instructions: str | None = None, own: bool = True
) -> dict[str, Any]:
    """``response.create``; ``own=False``: out of band (a fixed text to speak), its output
    not kept in the provider's conversation (Parley's context keeps what was spoken)."""
    response: dict[str, Any] = {}
    if dialect == "beta":
        response["modalities"] = ["audio", "text"]
    if tool_choice is not None:
        response["tool_choice"] = tool_choice
    if instructions is not None:
        response["instructions"] = instructions
    if not own:
        response["conversation"] = "none"
        response["input"] = []
    return {"type": "response.create", "response": response}


def cancel_response() -> dict[str, Any]:
    return {"type": "response.cancel"}


def message_item(dialect: Dialect, role: str, text: str) -> dict[str, Any]:
    """A text message item; the assistant's content type differs between dialects."""
    if role == "assistant":
        kind = "text" if dialect == "beta" else "output_text"
    else:
        kind = "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def function_call_item(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def function_output_item(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}
