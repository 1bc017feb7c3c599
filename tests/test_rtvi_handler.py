"""The client → server dispatcher with a recording session: the app's client-message
handlers (public registration API) and client-side tool results."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from pipeline.tools.client import ClientToolError
from server.rtvi import server_messages
from server.rtvi.handler import ClientMessages, RTVIHandler, RTVISession
from server.rtvi.protocol import ClientReadyData, FunctionCallResultData, SendTextData


class RecordingSession:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.results: list[FunctionCallResultData] = []
        self.waiting = {"c1"}

    def send(self, msg: dict[str, Any]) -> None:
        server_messages.validate(msg)
        self.sent.append(msg)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        return asyncio.create_task(coro, name=name)

    def set_client(self, ready: ClientReadyData) -> None: ...

    def send_text(self, data: SendTextData) -> None: ...

    def request_close(self, reason: str) -> None: ...

    def info(self) -> dict[str, Any]:
        return {"pc_id": "p"}

    def client_tool_result(self, data: FunctionCallResultData) -> None:
        if data.tool_call_id not in self.waiting:
            raise ClientToolError(f"no client tool call {data.tool_call_id!r} is waiting")
        self.waiting.discard(data.tool_call_id)
        self.results.append(data)

    def send_server_message(self, data: Any) -> None:
        self.send(server_messages.build("server-message", data))


def msg(type_: str, msg_id: str, data: Any) -> dict[str, Any]:
    return {"label": "rtvi-ai", "type": type_, "id": msg_id, "data": data}


async def test_registered_handlers_answer_and_can_push_messages() -> None:
    handlers = ClientMessages.with_defaults()

    @handlers.on("weather")
    async def weather(session: RTVISession, d: Any) -> Any:
        session.send_server_message({"looking": d["city"]})
        return {"forecast": "sunny"}

    async def broken(session: RTVISession, d: Any) -> Any:
        raise RuntimeError("backend down")

    handlers.register("broken", broken)
    session = RecordingSession()
    handler = RTVIHandler(session, handlers)
    handler.handle(msg("client-message", "m1", {"t": "weather", "d": {"city": "Oslo"}}))
    handler.handle(msg("client-message", "m2", {"t": "broken"}))
    handler.handle(msg("client-message", "m3", {"t": "echo", "d": 7}))
    await asyncio.sleep(0.05)
    by_id = {m.get("id"): m for m in session.sent}
    assert by_id["m1"]["data"] == {"t": "weather", "d": {"forecast": "sunny"}}
    assert (
        by_id["m2"]["type"] == "error-response" and "backend down" in by_id["m2"]["data"]["error"]
    )
    assert by_id["m3"]["data"] == {"t": "echo", "d": 7}
    pushed = [m for m in session.sent if m["type"] == "server-message"]
    assert pushed[0]["data"] == {"looking": "Oslo"}
    handlers.unregister("weather")
    handler.handle(msg("client-message", "m4", {"t": "weather"}))
    await asyncio.sleep(0.01)
    assert session.sent[-1]["type"] == "error-response"


def test_registration_refuses_mistakes() -> None:
    handlers = ClientMessages.with_defaults()

    def not_async(session: RTVISession, d: Any) -> Any:
        return d

    async def fine(session: RTVISession, d: Any) -> Any:
        return d

    with pytest.raises(TypeError, match="async def"):
        handlers.register("sync", not_async)
    with pytest.raises(ValueError, match="already has a handler"):
        handlers.register("echo", fine)
    with pytest.raises(ValueError, match="non-empty"):
        handlers.register("", fine)
    handlers.register("echo", fine, replace=True)
    assert handlers["echo"] is fine


async def test_function_call_results_reach_the_session_or_get_error_responses() -> None:
    session = RecordingSession()
    handler = RTVIHandler(session, ClientMessages())
    result = {"function_name": "f", "tool_call_id": "c1", "arguments": {}, "result": {"ok": 1}}
    handler.handle(msg("llm-function-call-result", "r1", result))
    handler.handle(msg("llm-function-call-result", "r2", result))
    assert [r.result for r in session.results] == [{"ok": 1}]
    assert session.sent == [
        {
            "label": "rtvi-ai",
            "type": "error-response",
            "id": "r2",
            "data": {"error": "no client tool call 'c1' is waiting"},
        }
    ]
