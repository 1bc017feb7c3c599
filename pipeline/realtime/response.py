"""One realtime response as an LLM stream: the provider's server events for it in, the
pipeline's chunks (spoken audio, its transcript, tool calls, usage) out.

The events arrive on the connection's reader task and are queued here; the bot turn
reads them at its own pace. A response that fails, stalls past ``timeout`` or loses its
socket ends the stream with an error, which ends the bot turn (not the call).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from pipeline.messages import Usage
from pipeline.realtime import wire
from pipeline.realtime.mirror import ReplyItem
from pipeline.services.errors import ServiceError
from pipeline.services.llm import (
    AudioDelta,
    LLMChunk,
    LLMStream,
    TextDelta,
    ToolCallRequest,
    UsageReport,
)

_END = wire.ServerEvent("parley.end")


class RealtimeError(ServiceError):
    """The realtime endpoint failed a response, closed, or went quiet."""

    def __init__(self, message: str) -> None:
        super().__init__("llm", message)


class RealtimeResponse(LLMStream):
    """Chunks of one response. ``start`` sends what starts it (once the stream is read);
    ``cancel`` is called if the stream is closed before the response is done."""

    def __init__(
        self,
        start: Callable[[RealtimeResponse], Awaitable[None]],
        cancel: Callable[[], None],
        timeout: float,
        own: bool = True,
    ) -> None:
        self.own = own  # False: out of band, not in the provider's conversation
        self._events: asyncio.Queue[wire.ServerEvent] = asyncio.Queue()
        self._start = start
        self._cancel = cancel
        self._timeout = timeout
        self.done = False  # the stream has ended (completed, failed or closed)
        self.completed = False  # the provider said the response is done
        self.items: list[ReplyItem] = []
        self.audio_ms: dict[str, float] = {}  # per spoken item: ms of audio received
        super().__init__(self._body)

    def feed(self, event: wire.ServerEvent) -> None:
        """A server event for this response (from the connection's reader). Its items
        are known at once (the service binds them when the response is done)."""
        if event.kind == "response.output_item.added":
            item = event.get("item") or {}
            self.items.append(ReplyItem(str(item.get("id")), str(item.get("type")),
                                        item.get("call_id"), item.get("name")))  # fmt: skip
        self._events.put_nowait(event)

    def fail(self, reason: str) -> None:
        self._events.put_nowait(wire.ServerEvent("parley.failed", {"reason": reason}))

    async def _body(self, stream: LLMStream) -> AsyncGenerator[LLMChunk, None]:
        await self._start(self)
        try:
            while True:
                event = await self._next()
                if event.kind == "response.done":
                    self.done = self.completed = True
                    for last in self._finished(event):
                        yield last
                    return
                chunk = self._chunk(event)
                if chunk is not None:
                    if not isinstance(chunk, UsageReport):
                        self.first_token()
                    yield chunk
        finally:
            if not self.done:
                self.done = True
                self._cancel()

    async def _next(self) -> wire.ServerEvent:
        try:
            event = await asyncio.wait_for(self._events.get(), self._timeout)
        except TimeoutError:
            message = f"no answer from the realtime endpoint in {self._timeout:g} s"
            raise RealtimeError(message) from None
        if event.kind == "parley.failed":
            raise RealtimeError(str(event.get("reason")))
        if event.kind == "error":
            error = event.get("error") or {}
            raise RealtimeError(str(error.get("message") or error or "error"))
        return event

    def _chunk(self, event: wire.ServerEvent) -> LLMChunk | None:
        kind = event.kind
        if kind == "response.output_audio.delta":
            pcm = wire.audio_of(event)
            item_id = str(event.get("item_id"))
            self.audio_ms[item_id] = self.audio_ms.get(item_id, 0.0) + len(pcm) / 48.0
            return AudioDelta(pcm, wire.API_RATE) if pcm else None
        elif kind in ("response.output_audio_transcript.delta", "response.output_text.delta"):
            delta = event.get("delta")
            return TextDelta(delta) if isinstance(delta, str) and delta else None
        elif kind == "response.function_call_arguments.done":
            return self._tool_call(event)
        return None

    def _tool_call(self, event: wire.ServerEvent) -> ToolCallRequest:
        """A complete call; its name from the item that announced it (the GA and beta
        ``function_call_arguments.done`` carry only the call id and the arguments)."""
        call_id, item_id = event.get("call_id"), event.get("item_id")
        item = next((i for i in self.items if i.item_id == item_id or i.call_id == call_id),
                    None)  # fmt: skip
        name = event.get("name") or (item.name if item is not None else None)
        if call_id is None and item is not None:
            call_id = item.call_id
        try:
            arguments: Any = json.loads(event.get("arguments") or "{}")
        except ValueError:
            arguments = {}
        if not isinstance(arguments, dict):
            arguments = {}
        return ToolCallRequest(str(call_id), str(name), arguments)

    def _finished(self, event: wire.ServerEvent) -> list[LLMChunk]:
        response = event.get("response") or {}
        status = response.get("status")
        if status == "failed":
            details = response.get("status_details") or {}
            error = details.get("error") or details
            raise RealtimeError(f"the realtime response failed: {error}")
        calls = any(item.kind == "function_call" for item in self.items)
        self.finish_reason = "tool_calls" if calls else ("stop" if status == "completed"
                                                          else str(status))  # fmt: skip
        usage = response.get("usage") or {}
        if not usage:
            return []
        return [UsageReport(Usage(input_tokens=int(usage.get("input_tokens") or 0),
                                  output_tokens=int(usage.get("output_tokens") or 0)))]  # fmt: skip
