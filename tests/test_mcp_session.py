"""MCP servers configured on a real server (``PARLEY_MCP_SERVERS``): one over stdio and one
over streamable HTTP, both real SDK servers (``testkit.mcp_server``). Their tools are offered
to the LLM and answered into the context; the stdio process killed in the middle of a call
leaves the call talking, is reported by ``/health`` and ``/ready`` (advisory: the server
stays ready), and comes back by itself.

Real servers (subprocesses) with every model at the OpenAI-compatible stub and the aiortc
test client; what the LLM was offered and given is read from the requests the stub saw.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from testkit.mcp_server import HTTPServerProcess
from testkit.openai_stub import ChatReply, OpenAIStub, ToolCall
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess, free_port

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def http_mcp() -> Iterator[HTTPServerProcess]:
    server = HTTPServerProcess(name="inventory")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mcp_server(
    start_server: Callable[..., ServerProcess], stub: OpenAIStub, http_mcp: HTTPServerProcess
) -> ServerProcess:
    stdio = [sys.executable, "-m", "testkit.mcp_server", "--transport", "stdio", "--clash"]
    servers = [
        {"name": "orders", "command": stdio, "timeout": 10},
        {"name": "inventory", "url": http_mcp.url, "timeout": 10},
        {"name": "offline", "url": f"http://127.0.0.1:{free_port()}/mcp"},  # nobody there
    ]
    return start_server(**stub.server_settings(mcp_servers=json.dumps(servers)))


def tool_result(body: dict[str, Any], call_id: str) -> Any:
    message = next(m for m in body["messages"] if m.get("tool_call_id") == call_id)
    return json.loads(message["content"])


async def ask(client: RTCTestClient, stub: OpenAIStub, text: str, requests: int) -> list[Any]:
    client.send_rtvi("send-text", {"content": text})
    assert await stub.wait_for(lambda: len(stub.requests(CHAT)) >= requests, within=20)
    return [r.body for r in stub.requests(CHAT)]


def tool_result_text(body: dict[str, Any], call_id: str) -> str:
    return next(m["content"] for m in body["messages"] if m.get("tool_call_id") == call_id)


def health(server: ServerProcess) -> dict[str, Any]:
    return httpx.get(f"{server.url}/health", timeout=5).json()


async def test_stdio_and_http_tools_are_offered_and_answered(
    mcp_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    add = ToolCall("add", {"a": 2, "b": 3}, id="call_add")
    lookup = ToolCall("inventory_lookup_order", {"order_id": "Z9"}, id="call_lookup")
    stub.script_chat(ChatReply(tool_calls=(add, lookup)), "Five, and Z9 has shipped.")
    async with RTCTestClient(mcp_server.url) as client:
        first, second = (await ask(client, stub, "Add two and three, and find Z9.", 2))[:2]
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    # The built-in get_current_time keeps its name; the stdio server's is prefixed.
    assert "get_current_time" in offered and "orders_get_current_time" in offered
    # Both servers offer "add": the first keeps the name, the second is prefixed.
    assert "add" in offered and "inventory_add" in offered
    assert offered["add"]["description"] == "Add two integers."
    assert offered["add"]["parameters"]["required"] == ["a", "b"]
    assert tool_result(second, "call_add") == {"result": 5}  # the SDK wraps a plain return
    looked_up = tool_result(second, "call_lookup")
    assert looked_up["status"] == "shipped" and looked_up["order_id"] == "Z9"
    status = health(mcp_server)["tools"]["mcp"]
    assert status["orders"]["state"] == "connected" and status["orders"]["transport"] == "stdio"
    assert status["inventory"]["state"] == "connected"
    assert status["inventory"]["transport"] == "http"


async def test_a_killed_mcp_process_leaves_the_call_talking_and_comes_back(
    mcp_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    pid_call = ToolCall("pid", {}, id="call_pid")
    slow = ToolCall("slow", {"seconds": 8}, id="call_slow")
    add = ToolCall("add", {"a": 1, "b": 1}, id="call_add_again")
    stub.script_chat(
        ChatReply(tool_calls=(pid_call,)),
        "Got it.",
        ChatReply(tool_calls=(slow,)),
        "Sorry, the order system is down.",
        ChatReply(tool_calls=(add,)),
        "Two.",
    )
    async with RTCTestClient(mcp_server.url) as client:
        bodies = await ask(client, stub, "Which process?", 2)
        pid = int(tool_result(bodies[1], "call_pid")["result"])
        client.send_rtvi("send-text", {"content": "Check slowly."})
        assert await stub.wait_for(lambda: len(stub.requests(CHAT)) >= 3, within=10)
        await client.wait_for(
            lambda m: (
                m.get("type") == "llm-function-call-in-progress"
                and m["data"].get("tool_call_id") == "call_slow"
            )
        )
        os.kill(pid, signal.SIGKILL)  # mid-call: the slow tool is running in it
        assert await stub.wait_for(lambda: len(stub.requests(CHAT)) >= 4, within=8)
        failed = tool_result(stub.requests(CHAT)[3].body, "call_slow")
        await client.wait_for(
            lambda m: m.get("type") == "bot-tts-text" and "down" in m["data"]["text"]
        )
        assert await stub.wait_for(
            lambda: health(mcp_server)["tools"]["mcp"]["orders"]["state"] == "connected",
            within=20,
        )
        bodies = await ask(client, stub, "Add one and one.", 6)
    assert "error" in failed and "orders" in json.dumps(failed)
    assert tool_result(bodies[5], "call_add_again") == {"result": 2}
    status = health(mcp_server)["tools"]["mcp"]["orders"]
    assert status["reconnects"] >= 1


def test_a_server_that_is_down_is_reported_and_its_tools_do_not_stall_calls(
    mcp_server: ServerProcess,
) -> None:
    ready = httpx.get(f"{mcp_server.url}/ready", timeout=5)
    assert ready.status_code == 200  # advisory: a tool server down does not stop the calls
    check = ready.json()["checks"]["tools"]
    assert check["ok"] is False and check["advisory"] is True
    assert "offline" in check["detail"] and "orders" not in check["detail"]
    status = health(mcp_server)["tools"]["mcp"]["offline"]
    assert status["state"] == "failing" and status["last_error"]


async def test_huge_results_reach_the_llm_within_the_bounds(
    mcp_server: ServerProcess, stub: OpenAIStub
) -> None:
    # 2 MB over stdio (read whole by the SDK, then cut), 2 MB over HTTP (past the
    # transport's 1 MiB: an error for that call alone), 400 KB over HTTP (cut).
    stub.reset()
    calls = {
        "call_stdio": ToolCall("blob", {"size": 2 * 2**20}, id="call_stdio"),
        "call_past": ToolCall("inventory_blob", {"size": 2 * 2**20}, id="call_past"),
        "call_http": ToolCall("inventory_blob", {"size": 400_000}, id="call_http"),
    }
    for call in calls.values():
        stub.script_chat(ChatReply(tool_calls=(call,)), "That is a lot.")
    sent: dict[str, Any] = {}
    async with RTCTestClient(mcp_server.url) as client:
        for n, call_id in enumerate(calls, start=1):
            body = (await ask(client, stub, f"Fetch dump {n}.", 2 * n))[2 * n - 1]
            sent[call_id] = tool_result_text(body, call_id)
            # The context's budget (8,000 estimated tokens by default) holds the result
            # with the question that asked for it: the result is cut to half of it.
            assert any(m.get("content") == f"Fetch dump {n}." for m in body["messages"])
            assert len(json.dumps(body["messages"])) < 8000 * 4
    assert sent["call_stdio"].startswith('"xxxx') and sent["call_stdio"].endswith("budget]")
    assert "1048576" in json.loads(sent["call_past"])["error"]
    assert sent["call_http"].startswith('"xxxx') and sent["call_http"].endswith("budget]")
    assert health(mcp_server)["tools"]["mcp"]["inventory"]["state"] == "connected"
