"""The demo async tool ``research_topic`` consults nothing: a running server offers it to the
LLM only with ``PARLEY_DEMO_TOOLS=true``; the real built-in tool is offered either way.

Real servers (subprocesses) with every model at the OpenAI-compatible stub, and the aiortc
test client; what the LLM was offered is read from the request the stub recorded.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pipeline.tools.builtin import default_registry
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

CHAT = "/v1/chat/completions"


async def offered_tools(server: ServerProcess, stub: OpenAIStub) -> list[str]:
    """The names of the tools the LLM request of one text turn carried."""
    stub.reset()
    stub.script_chat("It is noon.")
    async with RTCTestClient(server.url) as client:
        client.send_rtvi("send-text", {"content": "What time is it?"})
        assert await stub.wait_for(lambda: bool(stub.requests(CHAT)), within=10)
    body = stub.requests(CHAT)[0].body
    return [tool["function"]["name"] for tool in body.get("tools", [])]


@pytest.mark.e2e
@pytest.mark.parametrize(("setting", "offered"), [(None, False), ("true", True)])
async def test_the_demo_tool_is_offered_only_when_asked_for(
    start_server: Callable[..., ServerProcess],
    stub: OpenAIStub,
    setting: str | None,
    offered: bool,
) -> None:
    extra = {"demo_tools": setting} if setting is not None else {}
    server = start_server(**stub.server_settings(greeting="", **extra))
    names = await offered_tools(server, stub)
    assert "get_current_time" in names
    assert ("research_topic" in names) is offered


def test_the_registry_leaves_the_demo_tool_out_by_default() -> None:
    assert [spec.name for spec in default_registry()] == ["get_current_time"]
    demo = default_registry(demo_tools=True)
    assert [spec.name for spec in demo] == ["get_current_time", "research_topic"]
    description = demo.openai_tools()[1]["function"]["description"]
    assert "consults no sources" in description
