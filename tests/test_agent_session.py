"""An agent file run by a real server (``PARLEY_AGENT``): its tools offered with their
docstrings and answered into the context, state kept per call, the hooks, a handoff that
changes instructions and tools for the rest of the call, and a tool that ends the call.

Real servers (subprocesses) with every model at the OpenAI-compatible stub, the aiortc
test client; what the LLM was offered and given is read from the requests the stub
recorded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.openai_stub import ChatReply, OpenAIStub, ToolCall
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
AGENT = Path(__file__).parent / "agent_files" / "front_desk.py"


@pytest.fixture(scope="module")
def hook_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("agent-hooks")
    os.environ["AGENT_TEST_OUT"] = str(folder)  # the server's environment inherits it
    yield folder
    os.environ.pop("AGENT_TEST_OUT", None)


@pytest.fixture(scope="module")
def agent_server(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub, hook_dir: Path
) -> ServerProcess:
    return start_server(**stub.server_settings(agent=str(AGENT)))


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", [])]


def server_messages(client: RTCTestClient, hook: str) -> list[dict[str, Any]]:
    return [
        m["data"]
        for m in client.messages
        if m.get("type") == "server-message" and m["data"].get("hook") == hook
    ]


async def chat_requests(stub: OpenAIStub, count: int) -> list[dict[str, Any]]:
    assert await stub.wait_for(lambda: len(stub.requests(CHAT)) >= count, within=15)
    return [r.body for r in stub.requests(CHAT)]


async def test_the_agents_tool_is_offered_called_and_answered(
    agent_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    lookup = ToolCall("get_order_status", {"order_id": "A7"}, id="call_lookup")
    stub.script_chat(ChatReply(tool_calls=(lookup,)), "Your order A7 has shipped.")
    async with RTCTestClient(agent_server.url) as client:
        client.send_rtvi("send-text", {"content": "Where is my order A7?"})
        first, second = (await chat_requests(stub, 2))[:2]
        await client.wait_for(lambda m: m.get("type") == "bot-llm-stopped")
        state = await client.request("state", {"q": 1})
        turns = server_messages(client, "turn")
        starts = server_messages(client, "start")
    assert first["messages"][0] == {"role": "system", "content": "You are the front desk."}
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    order = offered["get_order_status"]
    assert order["description"] == "Look up an order."
    assert order["parameters"]["properties"]["order_id"]["description"] == (
        "The order number the customer reads out."
    )
    assert "get_current_time" in offered  # the built-in tools are still there
    tool_message = next(m for m in second["messages"] if m["role"] == "tool")
    assert tool_message["tool_call_id"] == "call_lookup"
    assert json.loads(tool_message["content"]) == {"order_id": "A7", "status": "shipped"}
    assert state["data"]["d"] == {
        "state": {"lookups": 1, "request_data": None},
        "agent": "desk",
        "asked": {"q": 1},
    }
    assert turns == [{"hook": "turn", "text": "Where is my order A7?"}]
    assert starts == [{"hook": "start", "call_id": client.pc_id}]


async def test_a_handoff_changes_instructions_and_tools_and_keeps_the_conversation(
    agent_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    transfer = ToolCall("transfer_to_returns", {}, id="call_transfer")
    start_return = ToolCall("start_return", {"order_id": "B2"}, id="call_return")
    stub.script_chat(
        ChatReply(tool_calls=(transfer,)),
        "Returns desk here, how can I help?",
        ChatReply(tool_calls=(start_return,)),
        "Your return is started.",
    )
    async with RTCTestClient(agent_server.url) as client:
        client.send_rtvi("send-text", {"content": "I want to return order B2."})
        await chat_requests(stub, 2)
        await client.wait_for(lambda m: m.get("type") == "bot-llm-stopped")
        client.send_rtvi("send-text", {"content": "Yes, B2 please."})
        bodies = await chat_requests(stub, 4)
        state = await client.request("state")
    first, after = bodies[0], bodies[1]
    assert "transfer_to_returns" in tool_names(first)
    assert after["messages"][0] == {"role": "system", "content": "You are the returns desk."}
    assert "start_return" in tool_names(after)
    assert "get_order_status" not in tool_names(after)
    texts = [m.get("content") for m in after["messages"]]
    assert "I want to return order B2." in texts  # the conversation carried over
    result = next(m for m in bodies[3]["messages"] if m.get("tool_call_id") == "call_return")
    assert json.loads(result["content"]) == {"return_id": "R-B2", "handled_by": "returns"}
    assert state["data"]["d"]["agent"] == "returns"


async def test_a_tool_ends_the_call_after_the_goodbye_and_the_end_hook_runs(
    agent_server: ServerProcess, stub: OpenAIStub, hook_dir: Path
) -> None:
    stub.reset()
    stub.script_chat(ChatReply(tool_calls=(ToolCall("end_call", {}, id="call_end"),)))
    async with RTCTestClient(agent_server.url) as client:
        client.send_rtvi("send-text", {"content": "That's all, bye."})
        goodbye = await client.wait_for(
            lambda m: m.get("type") == "bot-tts-text" and "Goodbye" in m["data"]["text"]
        )
        await client.wait_for(lambda m: m.get("type") == "bot-tts-stopped", within=15)
        pc_id = client.pc_id
        out = hook_dir / f"{pc_id}.json"
        assert await stub.wait_for(out.exists, within=15)
    assert goodbye
    record = json.loads(out.read_text())
    assert record["reason"] == "ended by the agent"
    assert record["agent"] == "desk"
