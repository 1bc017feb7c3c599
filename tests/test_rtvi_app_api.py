"""The app API of the RTVI layer, in process: an app registers a client-message handler
and a client-side tool on ``create_app()``'s app, and a WebRTC client uses both."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from pipeline.tools.registry import ToolSpec
from server.api.app import create_app
from server.rtvi.handler import RTVISession
from server.settings import Settings
from testkit.openai_stub import ChatReply, OpenAIStub, ToolCall
from testkit.openai_stub import openai_stub_fixture as openai_stub_fixture
from testkit.rtc_client import RTCTestClient
from testkit.server_process import free_port

MAP_TOOL = ToolSpec(
    name="show_map",
    description="Show a map of a place on the user's screen.",
    parameters={"type": "object", "properties": {"place": {"type": "string"}}},
    client_side=True,
    report_level="full",
)


@pytest.fixture
async def app_url(openai_stub: OpenAIStub) -> AsyncIterator[str]:
    port = free_port()
    stub_settings = openai_stub.server_settings(host="127.0.0.1", greeting="")
    settings = Settings(port=port, preload_models=False, **stub_settings)
    app = create_app(settings)

    @app.state.client_messages.on("weather")
    async def weather(session: RTVISession, d: Any) -> Any:
        session.send_server_message({"looking_up": d})
        return {"forecast": "sunny"}

    app.state.tools.register(MAP_TOOL)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="on")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    async with asyncio.timeout(15):
        while not server.started:
            await asyncio.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await serving


async def test_an_app_adds_a_client_message_and_a_client_tool(
    app_url: str, openai_stub: OpenAIStub
) -> None:
    async with RTCTestClient(app_url) as client:
        answer = await client.request("weather", "Oslo")
        assert answer["data"] == {"t": "weather", "d": {"forecast": "sunny"}}
        pushed = await client.wait_for(lambda m: m.get("type") == "server-message")
        assert pushed["data"] == {"looking_up": "Oslo"}

        call = ToolCall("show_map", {"place": "Oslo"}, id="m1")
        openai_stub.script_chat(ChatReply("", (call,)), "There it is.")
        client.send_rtvi("send-text", {"content": "Show me Oslo."})
        progress = await client.wait_for(lambda m: m.get("type") == "llm-function-call-in-progress")
        client.send_rtvi(
            "llm-function-call-result",
            {**progress["data"], "result": "the map is on screen"},
        )
        stopped = await client.wait_for(lambda m: m.get("type") == "llm-function-call-stopped")
        assert stopped["data"]["result"] == "the map is on screen", "report level full"
        output = await client.wait_for(lambda m: m.get("type") == "bot-output")
        assert output["data"]["text"] == "There it is."
        first = openai_stub.requests("/v1/chat/completions")[0].body
        assert "show_map" in [t["function"]["name"] for t in first["tools"]]
