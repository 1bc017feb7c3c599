"""What passes between an MCP server and the LLM: valid tool names, the input schema as an
object schema, a tool result as the LLM reads it (bounded as HTTP tools' results are:
:mod:`pipeline.tools.sources.result_bounds`), header variables expanded, and a short
reason for an SDK failure. Pure functions, used by :mod:`pipeline.tools.sources.mcp_connection`.
"""

from __future__ import annotations

import os
import re
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from pipeline.tools.runner import error_result
from pipeline.tools.sources.result_bounds import MAX_RESULT_BYTES, bounded, cut

_INVALID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class MissingVariableError(LookupError):
    """A header refers to an environment variable that is not set."""


def expand_headers(headers: dict[str, str] | None) -> dict[str, str]:
    """``${VAR}`` in header values replaced from ``os.environ``; raises
    :class:`MissingVariableError` naming the header and the variable."""
    out: dict[str, str] = {}
    for key, value in (headers or {}).items():
        for variable in _VARIABLE.findall(value):
            if variable not in os.environ:
                message = f"header {key}: environment variable {variable} is not set"
                raise MissingVariableError(message)
        out[key] = _VARIABLE.sub(lambda m: os.environ[m.group(1)], value)
    return out


def tool_name(name: str) -> str | None:
    """``name`` made a valid tool name (other characters → ``_``, at most 64); None if empty."""
    return _INVALID_CHARS.sub("_", name)[:64] or None


def object_schema(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The tool's input schema as the LLM sees it: an object schema, ``properties`` present;
    None for a schema that is not about an object."""
    if schema.get("type", "object") != "object":
        return None
    return {"type": "object", "properties": {}, **schema}


def result_for_llm(result: types.CallToolResult) -> Any:
    """What the LLM reads: ``{"error": text}`` for an ``isError`` result, else the
    structured content if any, else the text of the content blocks; text cut at the
    bound, and structured content too large or too deep given as the blocks' text (a
    server should send its JSON there too), or as its own JSON if there is none."""
    text = _text(result.content)
    if result.is_error:
        return error_result(cut(text) or "the tool reported an error")
    if result.structured_content is not None:
        return bounded(result.structured_content, text or None)
    return cut(text)


def _text(blocks: list[types.ContentBlock]) -> str:
    """The blocks' text, one a line, up to one character past the bound (then cut)."""
    parts: list[str] = []
    room = MAX_RESULT_BYTES + 1
    for block in blocks:
        if room <= 0:
            break
        part = _describe(block)[:room]  # a huge text is not copied whole
        parts.append(part)
        room -= len(part) + 1
    return "\n".join(parts)


def _describe(block: types.ContentBlock) -> str:
    match block:
        case types.TextContent(text=text):
            return text
        case types.ImageContent(mime_type=mime) | types.AudioContent(mime_type=mime):
            return f"[{block.type}: {mime}]"
        case types.EmbeddedResource(resource=types.TextResourceContents(text=text)):
            return text
        case types.EmbeddedResource(resource=resource):
            return f"[resource: {resource.uri} ({resource.mime_type or 'binary'})]"
        case types.ResourceLink(uri=uri):
            return f"[resource: {uri}]"
    return f"[{getattr(block, 'type', 'content')}]"


def reason(exc: BaseException) -> str:
    """A short, readable cause: the first real error inside the SDK's task-group groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        closed = exc.code == CONNECTION_CLOSED and exc.message.lower() == "connection closed"
        return "the connection closed" if closed else exc.message
    if isinstance(exc, TimeoutError):
        return str(exc) or "no answer in time"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
