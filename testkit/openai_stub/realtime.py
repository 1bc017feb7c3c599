"""The stub's realtime endpoint: ``/v1/realtime`` over a real WebSocket, speaking the
OpenAI Realtime protocol (GA event names, or the beta ones with ``dialect="beta"``).

It keeps each connection's conversation as the provider would (items created, deleted,
truncated; user audio committed from the input buffer) and answers ``response.create``
with scripted replies: the transcript's words, each just before the audio that speaks
it (the stub's buzz, 24 kHz s16le, ``seconds_per_char`` long), then the tool calls. What every
client event was, and each connection's conversation, is recorded for the tests.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fastapi import WebSocket, WebSocketDisconnect

from testkit.openai_stub.audio import buzz
from testkit.openai_stub.script import ToolCall

RATE = 24000
CHUNK_SECONDS = 0.1
_BETA = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "conversation.item.added": "conversation.item.created",
}


@dataclass(frozen=True)
class RealtimeReply:
    """A scripted response: spoken ``text``, then ``tool_calls``. ``drop_after``: close
    the socket after that many audio chunks; ``error``: answer with an error event."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    drop_after: int | None = None
    error: str | None = None


@dataclass
class RealtimeScript:
    """The realtime endpoint's config and records (change per test)."""

    first_audio_delay: float = 0.0
    seconds_per_char: float = 0.06
    chunk_interval: float = 0.02  # between audio chunks (faster than playout, as OpenAI)
    default_text: str = "Sure, here is the answer."
    dialect: str = "ga"
    replies: list[RealtimeReply | str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # every client event
    conversations: list[list[dict[str, Any]]] = field(default_factory=list)  # per socket
    headers: list[dict[str, str]] = field(default_factory=list)

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == kind]


class ServerVAD:
    """The provider's VAD, as the stub plays it: 20 ms windows louder than ``LOUD`` RMS;
    speech after 3 of them, its end after 0.5 s without one."""

    LOUD = 300.0

    def __init__(self) -> None:
        self.on = False
        self.speaking = False
        self.run = 0
        self.tail = b""

    def configure(self, session: dict[str, Any]) -> None:
        audio = session.get("audio") or {}
        detection = (audio.get("input") or {}).get("turn_detection", session.get("turn_detection"))
        self.on = bool(detection)

    def hear(self, pcm: bytes) -> list[str]:
        """The turns this audio started or ended ("started", "stopped")."""
        if not self.on:
            return []
        data, turns, size = self.tail + pcm, [], 960  # 20 ms at 24 kHz
        for start in range(0, len(data) - size + 1, size):
            window = np.frombuffer(data[start : start + size], np.int16).astype(np.float32)
            loud = float(np.sqrt(np.mean(window**2))) > self.LOUD
            if loud == self.speaking:
                self.run = 0
                continue
            self.run += 1
            if self.run >= (3 if not self.speaking else 25):
                self.speaking, self.run = not self.speaking, 0
                turns.append("started" if self.speaking else "stopped")
        self.tail = data[len(data) - len(data) % size :]
        return turns


class RealtimeEndpoint:
    """Mixed into the stub; ``self.realtime`` is the script, reset with the stub."""

    realtime: RealtimeScript
    _realtime_lock: threading.Lock

    def _realtime_reset(self) -> None:
        self.realtime = RealtimeScript()

    async def _realtime(self, ws: WebSocket) -> None:
        key = getattr(getattr(self, "config", None), "api_key", None)
        await ws.accept()
        self.realtime.headers.append(dict(ws.headers))
        if key is not None and ws.headers.get("authorization") != f"Bearer {key}":
            await ws.send_text(
                json.dumps(
                    {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": "Incorrect API key"},
                    }
                )
            )
            await ws.close(1008, "bad key")
            return
        await _Connection(ws, self.realtime).run()


class _Connection:
    """One client socket: its conversation, input buffer and response in progress."""

    def __init__(self, ws: WebSocket, script: RealtimeScript) -> None:
        self.ws = ws
        self.script = script
        self.items: list[dict[str, Any]] = []
        script.conversations.append(self.items)
        self.buffer = bytearray()
        self.response: asyncio.Task[None] | None = None
        self.count = 0
        self.vad = ServerVAD()

    def _id(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count:04d}"

    async def send(self, event: dict[str, Any]) -> None:
        if self.script.dialect == "beta":
            event["type"] = _BETA.get(event["type"], event["type"])
        await self.ws.send_text(json.dumps(event))

    async def run(self) -> None:
        await self.send({"type": "session.created", "session": {"id": self._id("sess")}})
        try:
            while True:
                event = json.loads(await self.ws.receive_text())
                self.script.events.append(event)
                await self.handle(event)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            if self.response is not None:
                self.response.cancel()

    async def handle(self, event: dict[str, Any]) -> None:  # noqa: C901, PLR0912
        kind = event.get("type")
        if kind == "session.update":
            self.vad.configure(event.get("session") or {})
            await self.send({"type": "session.updated", "session": event.get("session")})
        elif kind == "input_audio_buffer.append":
            pcm = base64.b64decode(event["audio"])
            self.buffer += pcm
            for turn in self.vad.hear(pcm):
                await self._server_turn(turn)
        elif kind == "input_audio_buffer.clear":
            self.buffer.clear()
        elif kind == "input_audio_buffer.commit":
            if len(self.buffer) < 4800:  # as OpenAI: at least 100 ms
                await self.refuse(event, "buffer too small: expected at least 100ms")
            else:
                await self._commit()
        elif kind == "conversation.item.create":
            await self._create(event)
        elif kind == "conversation.item.delete":
            self.items[:] = [i for i in self.items if i["id"] != event["item_id"]]
            await self.send({"type": "conversation.item.deleted", "item_id": event["item_id"]})
        elif kind == "conversation.item.truncate":
            for item in self.items:
                if item["id"] == event["item_id"]:
                    item["audio_end_ms"] = event["audio_end_ms"]
            await self.send({"type": "conversation.item.truncated", **event})
        elif kind == "response.create":
            if self.response is not None and not self.response.done():
                await self.refuse(event, "Conversation already has an active response")
                return
            self.response = asyncio.create_task(self._respond(event.get("response") or {}))
        elif kind == "response.cancel" and self.response is not None:
            self.response.cancel()

    async def _server_turn(self, turn: str) -> None:
        """The stub's own VAD (server_vad): speech started (an answer in progress is
        cut), or stopped (the audio committed, an answer started)."""
        await self.send({"type": f"input_audio_buffer.speech_{turn}"})
        if turn == "started" and self.response is not None and not self.response.done():
            self.response.cancel()
        if turn == "stopped":
            await self._commit()
            self.response = asyncio.create_task(self._respond({}))

    async def refuse(self, event: dict[str, Any], message: str) -> None:
        """An ``invalid_request_error`` naming the client event that caused it."""
        error = {"type": "invalid_request_error", "message": message}
        await self.send({"type": "error", "error": {**error, "event_id": event.get("event_id")}})

    async def _commit(self) -> None:
        item = {
            "id": self._id("item_user"),
            "type": "message",
            "role": "user",
            "audio_ms": len(self.buffer) / 48.0,
        }
        previous = self.items[-1]["id"] if self.items else None
        self.items.append(item)
        self.buffer.clear()
        await self.send(
            {
                "type": "input_audio_buffer.committed",
                "item_id": item["id"],
                "previous_item_id": previous,
            }
        )
        await self.send({"type": "conversation.item.added", "item": item})

    async def _create(self, event: dict[str, Any]) -> None:
        item = dict(event["item"])
        item.setdefault("id", self._id("item"))
        previous = event.get("previous_item_id")
        at = len(self.items)
        if previous == "root":
            at = 0
        elif previous is not None:
            ids = [i["id"] for i in self.items]
            at = ids.index(previous) + 1 if previous in ids else len(self.items)
        self.items.insert(at, item)
        await self.send({"type": "conversation.item.added", "item": item})

    async def _respond(self, options: dict[str, Any]) -> None:
        response_id = self._id("resp")
        own = options.get("conversation") != "none"
        await asyncio.sleep(self.script.first_audio_delay)
        reply = self._reply(options)
        await self.send({"type": "response.created", "response": {"id": response_id}})
        try:
            if reply.error:
                await self.send(
                    {"type": "error", "error": {"type": "server_error", "message": reply.error}}
                )
                return
            if reply.text:
                await self._speak(response_id, reply, own)
            for n, call in enumerate(reply.tool_calls):
                await self._call(response_id, call, n, own)
            done = {
                "id": response_id,
                "status": "completed",
                "usage": {"input_tokens": 100, "output_tokens": 20},
            }
            await self.send({"type": "response.done", "response": done})
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await self.send(
                    {
                        "type": "response.done",
                        "response": {"id": response_id, "status": "cancelled"},
                    }
                )

    def _reply(self, options: dict[str, Any]) -> RealtimeReply:
        instructions = str(options.get("instructions") or "")
        if options.get("conversation") == "none" and ": " in instructions:
            return RealtimeReply(instructions.split(": ", 1)[1])  # a fixed text to say
        if self.script.replies:
            reply = self.script.replies.pop(0)
            return RealtimeReply(reply) if isinstance(reply, str) else reply
        return RealtimeReply(self.script.default_text)

    async def _speak(self, response_id: str, reply: RealtimeReply, own: bool) -> None:
        item: dict[str, Any] = {
            "id": self._id("item_bot"),
            "type": "message",
            "role": "assistant",
            "transcript": reply.text,
        }
        if own:
            self.items.append(item)
        await self.send(
            {
                "type": "response.output_item.added",
                "response_id": response_id,
                "item": {"id": item["id"], "type": "message"},
            }
        )
        audio = buzz(round(len(reply.text) * self.script.seconds_per_char * RATE)).tobytes()
        chunk = round(CHUNK_SECONDS * RATE) * 2
        chunks = math.ceil(len(audio) / chunk)
        words = reply.text.split(" ")
        told = 0
        for n in range(chunks):
            upto = math.ceil((n + 1) / chunks * len(words))
            if upto > told:
                delta = " ".join(words[told:upto]) + (" " if upto < len(words) else "")
                told = upto
                await self.send(
                    {
                        "type": "response.output_audio_transcript.delta",
                        "response_id": response_id,
                        "item_id": item["id"],
                        "delta": delta,
                    }
                )
            pcm = audio[n * chunk : (n + 1) * chunk]
            await self.send(
                {
                    "type": "response.output_audio.delta",
                    "response_id": response_id,
                    "item_id": item["id"],
                    "delta": base64.b64encode(pcm).decode(),
                }
            )
            item["audio_ms"] = item.get("audio_ms", 0.0) + len(pcm) / 48.0
            if reply.drop_after is not None and n + 1 >= reply.drop_after:
                await self.ws.close(1011, "stub: dropped on purpose")
                raise asyncio.CancelledError
            await asyncio.sleep(self.script.chunk_interval)

    async def _call(self, response_id: str, call: ToolCall, n: int, own: bool) -> None:
        call_id = call.id or f"call_{self._id('c')}"
        arguments = call.arguments
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        item = {
            "id": self._id("item_call"),
            "type": "function_call",
            "call_id": call_id,
            "name": call.name,
            "arguments": arguments,
        }
        if own:
            self.items.append(item)
        await self.send(
            {"type": "response.output_item.added", "response_id": response_id, "item": item}
        )
        await self.send(
            {
                "type": "response.function_call_arguments.done",
                "response_id": response_id,
                "item_id": item["id"],
                "call_id": call_id,
                "arguments": arguments,  # no name: as OpenAI's (the item has it)
            }
        )
