"""``POST /v1/chat/completions``: scripted replies and tool calls, as JSON or SSE."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from testkit.openai_stub.core import StubCore
from testkit.openai_stub.faults import Fault, Truncated
from testkit.openai_stub.script import ChatReply, RecordedRequest, ToolCall


def _tokens(text: str) -> list[str]:
    """Word-sized pieces that join back to ``text``."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


def _fragments(arguments: str, size: int = 7) -> list[str]:
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]


def _function(call: ToolCall) -> dict[str, str]:
    args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
    return {"name": call.name, "arguments": args}


def _finish(reply: ChatReply) -> str:
    return "tool_calls" if reply.tool_calls else "stop"


class ChatEndpoint(StubCore):
    """The chat-completions endpoint: text as word-sized chunks, tool calls in fragments."""

    async def _chat(self, request: Request) -> Response:
        record, item, early = await self._begin(request, "chat")
        if early is not None:
            return early
        fault = item if isinstance(item, Fault) else None
        reply = item if isinstance(item, ChatReply) else ChatReply(self.config.default_text)
        body = record.body
        if not body.get("stream"):
            record.completed = True
            return JSONResponse(self._completion(body, reply))
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events = self._chunks(body, reply, usage)
        return StreamingResponse(self._sse(events, fault, record), media_type="text/event-stream")

    def _usage(
        self, body: dict[str, Any], completion_tokens: int, reasoning_tokens: int = 0
    ) -> dict[str, Any]:
        prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        }
        if reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
        return usage

    def _completion(self, body: dict[str, Any], reply: ChatReply) -> dict[str, Any]:
        calls = [
            {"id": c.id or f"call_{i}", "type": "function", "function": _function(c)}
            for i, c in enumerate(reply.tool_calls)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.reasoning:
            message[reply.reasoning_field] = reply.reasoning
        if calls:
            message["tool_calls"] = calls
        return {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub-llm"),
            "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
            "usage": self._usage(
                body,
                len(_tokens(reply.reasoning)) + len(_tokens(reply.text)) + len(calls),
                len(_tokens(reply.reasoning)),
            ),
        }

    def _chunks(
        self, body: dict[str, Any], reply: ChatReply, usage: bool
    ) -> list[tuple[bool, dict[str, Any]]]:
        """``(is_content, chunk)`` in order: role, reasoning, text, tool calls, finish,
        usage."""
        model = body.get("model", "stub-llm")

        def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
            choices = (
                [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
            )
            return {
                "id": "chatcmpl-stub",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": choices,
            }

        out = [(False, chunk({"role": "assistant", "content": ""}))]
        thought = _tokens(reply.reasoning)
        out += [(True, chunk({reply.reasoning_field: t})) for t in thought]
        out += [(True, chunk({"content": t})) for t in _tokens(reply.text)]
        calls = reply.tool_calls
        for i, call in enumerate(calls):
            head = {"index": i, "id": call.id or f"call_{i}", "type": "function"}
            head["function"] = {"name": call.name, "arguments": ""}
            out.append((True, chunk({"tool_calls": [head]})))
        # Argument fragments round-robin across the calls, as parallel calls may arrive.
        pieces = [_fragments(_function(c)["arguments"]) for c in calls]
        for j in range(max((len(p) for p in pieces), default=0)):
            for i, frags in enumerate(pieces):
                if j < len(frags):
                    delta = {"tool_calls": [{"index": i, "function": {"arguments": frags[j]}}]}
                    out.append((True, chunk(delta)))
        out.append((False, chunk({}, _finish(reply))))
        if usage:
            final = chunk(None)
            final["usage"] = self._usage(body, sum(1 for c, _ in out if c), len(thought))
            out.append((False, final))
        return out

    async def _sse(
        self,
        events: list[tuple[bool, dict[str, Any]]],
        fault: Fault | None,
        record: RecordedRequest,
    ) -> AsyncIterator[bytes]:
        sent = 0  # content chunks so far
        on_purpose = False  # the body ends early because the script says so
        try:
            for index, (is_content, event) in enumerate(events):
                # A fault strikes after ``after`` content chunks, or before the finish
                # chunk when there are fewer; never before the role chunk.
                if fault is not None and index > 0 and sent >= fault.after:
                    on_purpose = fault.kind in ("cut", "truncate")
                    async for data in self._strike(fault):
                        yield data
                    fault = None
                if is_content:
                    delay = self.config.first_token_delay if sent == 0 else self.config.token_delay
                    await self._pause(delay)
                    sent += 1
                yield f"data: {json.dumps(event)}\n\n".encode()
            yield b"data: [DONE]\n\n"
            record.completed = True
        except Truncated:
            return
        finally:
            record.disconnected = not record.completed and not on_purpose
