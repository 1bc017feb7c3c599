"""The examples in examples/ do what their READMEs say: each runs in a real server (started
with the agent path its README documents), every model at the OpenAI-compatible stub, the
LLM scripted to call the example's tools, the aiortc test client as the caller (and, for
the page example, its own page in headless Chromium).

What the LLM was offered and given back is read from the requests the stub recorded.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from testkit.browser import chromium, open_page
from testkit.openai_stub import ChatReply, OpenAIStub, ToolCall
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ROOT, ServerProcess

CHAT = "/v1/chat/completions"
EXAMPLES = ROOT / "examples"
NAMES = ("bike_shop", "mcp_store", "page")
COMMAND = re.compile(r"PARLEY_AGENT=(\S+) make run")


def documented_agent(name: str) -> str:
    """The agent path in the example README's one command, as given there."""
    readme = (EXAMPLES / name / "README.md").read_text()
    commands = COMMAND.findall(readme)
    assert commands, f"examples/{name}/README.md shows no `PARLEY_AGENT=... make run`"
    assert len(set(commands)) == 1, f"examples/{name}/README.md shows several agents: {commands}"
    return commands[0]


def start_example(
    name: str, start_server: Callable[..., ServerProcess], stub: OpenAIStub
) -> ServerProcess:
    return start_server(**stub.server_settings(agent=documented_agent(name)))


@pytest.fixture(scope="module")
def bike_shop_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    return start_example("bike_shop", start_server, stub)


@pytest.fixture(scope="module")
def mcp_store_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    return start_example("mcp_store", start_server, stub)


@pytest.fixture(scope="module")
def page_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    return start_example("page", start_server, stub)


async def chat_requests(stub: OpenAIStub, count: int) -> list[dict[str, Any]]:
    """The bodies of the first ``count`` chat requests, once that many have arrived."""
    assert await stub.wait_for(lambda: len(stub.requests(CHAT)) >= count, within=15), (
        f"{len(stub.requests(CHAT))} chat requests, wanted {count}"
    )
    return [r.body for r in stub.requests(CHAT)]


def tool_result(body: dict[str, Any], tool_call_id: str) -> Any:
    """The JSON result of a tool call as a chat request gives it to the LLM."""
    message = next(m for m in body["messages"] if m.get("tool_call_id") == tool_call_id)
    assert message["role"] == "tool"
    return json.loads(message["content"])


def offered(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {tool["function"]["name"]: tool["function"] for tool in body.get("tools", [])}


def load_module(path: Path) -> ModuleType:
    """A file of an example as a module of its own, without putting its folder on sys.path."""
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the documentation --------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_each_example_readme_documents_a_command_whose_files_exist(name: str) -> None:
    folder = EXAMPLES / name
    readme = (folder / "README.md").read_text()
    agent = documented_agent(name)
    assert agent == f"examples/{name}/agent.py"
    assert (ROOT / agent).is_file()
    # Every file the README names in backticks (agent.py, static/page.js, ...) is there.
    named = re.findall(r"`([\w./-]+\.(?:py|js|html|md))`", readme)
    assert named, f"examples/{name}/README.md names none of its files"
    missing = [f for f in named if not (folder / f).exists() and not (ROOT / f).exists()]
    assert missing == []


def test_the_index_and_the_guide_link_to_what_exists() -> None:
    index = (EXAMPLES / "README.md").read_text()
    for name in NAMES:
        assert f"]({name}/)" in index, f"examples/README.md does not link {name}/"
    for doc in (EXAMPLES / "README.md", ROOT / "docs" / "build-your-agent.md"):
        links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text())
        assert links
        broken = [link for link in links if not (doc.parent / link).exists()]
        assert broken == [], f"{doc.relative_to(ROOT)} links to missing files"


# -- the bike shop -----------------------------------------------------------------------------


@pytest.mark.e2e
async def test_bike_shop_keeps_state_across_tool_calls_of_one_call_only(
    bike_shop_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    lookup = ToolCall("get_order_status", {"order_id": "a 1043"}, id="call_lookup")
    book = ToolCall(
        "book_repair",
        {"day": "tuesday", "time": "10:00", "problem": "gears skip"},
        id="call_book",
    )
    stub.script_chat(
        ChatReply(tool_calls=(lookup,)),
        ChatReply(tool_calls=(book,)),
        "You're booked in for Tuesday at ten.",
    )
    async with RTCTestClient(bike_shop_server.url) as client:
        client.send_rtvi("send-text", {"content": "My e-bike A1043 skips gears, can I book in?"})
        bodies = await chat_requests(stub, 3)
        await client.wait_for(lambda m: m.get("type") == "bot-llm-stopped")
    assert bodies[0]["messages"][0]["content"].startswith("You are the front desk of")
    found = tool_result(bodies[1], "call_lookup")
    assert found["found"] is True and found["order_id"] == "A1043"
    assert found["status"] == "ready for pickup"
    booked = tool_result(bodies[2], "call_book")
    # The order looked up by the first call, remembered in ctx.state for the second.
    assert booked["booked"] is True and booked["order_id"] == "A1043"
    assert booked["moved_from"] is None

    stub.reset()  # a new call starts with empty state
    stub.script_chat(ChatReply(tool_calls=(book,)), "Booked.")
    async with RTCTestClient(bike_shop_server.url) as other:
        other.send_rtvi("send-text", {"content": "Can I book a service on Tuesday at ten?"})
        bodies = await chat_requests(stub, 2)
    booked = tool_result(bodies[1], "call_book")
    assert booked["booked"] is True and "order_id" not in booked


@pytest.mark.e2e
async def test_bike_shop_hands_off_to_returns_which_reads_the_order_from_the_state(
    bike_shop_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    lookup = ToolCall("get_order_status", {"order_id": "A1047"}, id="call_lookup")
    transfer = ToolCall("transfer_to_returns", {}, id="call_transfer")
    start_return = ToolCall("start_return", {"reason": "wrong size"}, id="call_return")
    stub.script_chat(
        ChatReply(tool_calls=(lookup,)),
        ChatReply(tool_calls=(transfer,)),
        "Returns desk here. Why are you sending it back?",
        ChatReply(tool_calls=(start_return,)),
        "Your return R-A1047 is started.",
    )
    async with RTCTestClient(bike_shop_server.url) as client:
        client.send_rtvi("send-text", {"content": "I'd like to return order A1047."})
        await chat_requests(stub, 3)
        await client.wait_for(lambda m: m.get("type") == "bot-llm-stopped")
        client.send_rtvi("send-text", {"content": "It's the wrong size."})
        bodies = await chat_requests(stub, 5)
    desk, returns = bodies[1], bodies[2]
    assert desk["messages"][0]["content"].startswith("You are the front desk of")
    assert returns["messages"][0]["content"].startswith("You are the returns desk of")
    assert {"get_order_status", "book_repair", "transfer_to_returns"} <= set(offered(desk))
    assert "start_return" not in offered(desk)
    assert "start_return" in offered(returns)
    assert not {"get_order_status", "book_repair", "transfer_to_returns"} & set(offered(returns))
    assert "end_call" in offered(returns)  # both desks can hang up
    texts = [m.get("content") for m in returns["messages"]]
    assert "I'd like to return order A1047." in texts  # the conversation carried over
    started = tool_result(bodies[4], "call_return")
    assert started["started"] is True and started["return_id"] == "R-A1047"
    # The end hook ran, registered on the returns desk too (the agent in charge at the end).
    ended = f"call {client.pc_id} ended"
    assert await stub.wait_for(lambda: ended in bike_shop_server.log(), within=10)
    line = next(line for line in bike_shop_server.log().splitlines() if ended in line)
    assert "agent=returns" in line and "'return_id': 'R-A1047'" in line


@pytest.mark.e2e
async def test_bike_shop_end_call_hangs_up_after_the_goodbye_and_logs_the_call(
    bike_shop_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    book = ToolCall("book_repair", {"day": "friday", "time": "13:30", "problem": "a flat"})
    stub.script_chat(
        ChatReply(tool_calls=(book,)),
        ChatReply(tool_calls=(ToolCall("end_call", {}, id="call_end"),)),
    )
    async with RTCTestClient(bike_shop_server.url) as client:
        client.send_rtvi("send-text", {"content": "Friday at 1:30 for a flat, then bye."})
        left = await client.wait_for(
            lambda m: m.get("message", {}).get("type") == "peerLeft", within=20
        )
        call_id = client.pc_id
    messages = client.messages
    # bot-tts-text comes as a sentence starts playing: the goodbye recaps the booking made
    # by the first tool call, and its last sentence is the last thing said.
    said = [
        (i, m["data"]["text"]) for i, m in enumerate(messages) if m.get("type") == "bot-tts-text"
    ]
    assert [text for _, text in said[-2:]] == ["See you Friday at 13:30.", "Goodbye!"]
    last_sentence = said[-1][0]
    played = [i for i, m in enumerate(messages) if m.get("type") == "bot-stopped-speaking"]
    hung_up = messages.index(left)
    assert any(last_sentence < i < hung_up for i in played), "hung up before the goodbye ended"
    assert len(stub.requests(CHAT)) == 2, "run_llm=False: no LLM answer after end_call"
    end_line = f"call {call_id} ended (ended by the agent)"
    assert await stub.wait_for(lambda: end_line in bike_shop_server.log(), within=10), (
        "the on_call_end hook logged the call"
    )
    line = next(line for line in bike_shop_server.log().splitlines() if end_line in line)
    assert "agent=front-desk" in line and "'time': '13:30'" in line


# -- the MCP store -----------------------------------------------------------------------------


@pytest.mark.e2e
async def test_mcp_store_offers_the_servers_tools_and_returns_its_answers(
    mcp_store_server: ServerProcess, stub: OpenAIStub
) -> None:
    async with httpx.AsyncClient(timeout=5) as http:
        health = (await http.get(f"{mcp_store_server.url}/health")).json()
    stores = health["tools"]["mcp"]["stores"]
    assert stores["state"] == "connected", stores
    assert sorted(stores["tools"]) == ["check_stock", "store_hours"]
    stub.reset()
    calls = (
        ToolCall("check_stock", {"product": "inner tube"}, id="call_stock"),
        ToolCall("store_hours", {"store": "riverside"}, id="call_hours"),
        ToolCall("check_stock", {"product": "unicycle"}, id="call_none"),
    )
    stub.script_chat(ChatReply(tool_calls=calls), "Riverside has 12 tubes, open till six.")
    async with RTCTestClient(mcp_store_server.url) as client:
        client.send_rtvi("send-text", {"content": "Do you have inner tubes at riverside?"})
        first, second = (await chat_requests(stub, 2))[:2]
    tools = offered(first)
    assert tools["check_stock"]["description"].startswith("Find products by name")
    assert tools["store_hours"]["parameters"]["properties"]["store"]["enum"] == [
        "downtown",
        "riverside",
    ]
    # The answers are the MCP server's own: compare with its functions called directly.
    server = load_module(EXAMPLES / "mcp_store" / "store_server.py")
    assert tool_result(second, "call_stock") == server.check_stock("inner tube")
    assert tool_result(second, "call_stock")["products"][0]["stock"]["riverside"] == 12
    assert tool_result(second, "call_hours") == server.store_hours("riverside")
    failed = tool_result(second, "call_none")
    assert "nothing in the catalogue matches 'unicycle'" in failed["error"]


# -- the page ----------------------------------------------------------------------------------


@pytest.mark.e2e
def test_page_serves_its_own_static_folder(page_server: ServerProcess) -> None:
    index = httpx.get(f"{page_server.url}/", timeout=5)
    assert index.status_code == 200 and "Spoke &amp; Chain Cycles" in index.text
    script = httpx.get(f"{page_server.url}/page.js", timeout=5)
    assert script.status_code == 200 and "llm-function-call-result" in script.text


@pytest.mark.e2e
async def test_page_client_tool_round_trip_and_a_toast_from_a_server_tool(
    page_server: ServerProcess, stub: OpenAIStub
) -> None:
    stub.reset()
    show = ToolCall("show_product", {"product_id": "brompton"}, id="call_show")
    reserve = ToolCall(
        "reserve_for_pickup", {"product_id": "brompton", "store": "downtown"}, id="call_reserve"
    )
    stub.script_chat(
        ChatReply(tool_calls=(show,)),
        ChatReply(tool_calls=(reserve,)),
        "It's reserved for you downtown.",
    )
    shown = {"shown": "brompton", "name": "Brompton C Line Explore", "price": 1750}
    async with RTCTestClient(page_server.url) as client:
        client.send_rtvi("send-text", {"content": "Show me the Brompton and hold one for me."})
        asked = await client.wait_for(
            lambda m: (
                m.get("type") == "llm-function-call-in-progress"
                and m["data"].get("function_name") == "show_product"
            )
        )
        assert asked["data"]["tool_call_id"] == "call_show"
        assert asked["data"]["arguments"] == {"product_id": "brompton"}
        client.send_rtvi(
            "llm-function-call-result",
            {
                "function_name": "show_product",
                "tool_call_id": "call_show",
                "arguments": {"product_id": "brompton"},
                "result": shown,
            },
        )
        toast = await client.wait_for(lambda m: m.get("type") == "ui-command")
        bodies = await chat_requests(stub, 3)
    tools = offered(bodies[0])
    assert {"show_product", "set_theme", "reserve_for_pickup"} <= set(tools)
    assert tool_result(bodies[1], "call_show") == shown  # the page's answer reached the LLM
    reserved = tool_result(bodies[2], "call_reserve")
    assert reserved["reserved"] is True
    assert toast["data"]["command"] == "toast"
    assert toast["data"]["payload"] == {
        "title": "Reserved",
        "description": f"Brompton C Line Explore, at downtown, reference {reserved['reference']}",
    }


@pytest.mark.e2e
@pytest.mark.timeout(90)
def test_the_example_page_runs_the_client_tools_and_shows_the_toast_in_a_browser(
    page_server: ServerProcess, stub: OpenAIStub, silence_wav: Path, tmp_path: Path
) -> None:
    stub.reset()
    show = ToolCall("show_product", {"product_id": "kathmandu"}, id="call_show")
    theme = ToolCall("set_theme", {"theme": "dark"}, id="call_theme")
    reserve = ToolCall(
        "reserve_for_pickup", {"product_id": "helmet", "store": "riverside"}, id="call_reserve"
    )
    stub.script_chat(
        ChatReply(tool_calls=(show, theme)),
        ChatReply(tool_calls=(reserve,)),
        "The helmet is held for you at riverside.",
    )
    errors: list[str] = []
    with chromium(silence_wav, tmp_path / "profile") as context:
        browser = open_page(context, f"{page_server.url}/", errors)
        browser.click("#call")
        expect(browser.locator("#status")).to_have_text("Connected", timeout=15000)
        browser.fill("#text", "Show me the e-bike in dark mode, and hold a helmet for me.")
        browser.press("#text", "Enter")
        expect(browser.locator("#toasts .toast")).to_contain_text("Giro Register", timeout=15000)
        expect(browser.locator("#transcript li.bot")).to_have_text(
            "The helmet is held for you at riverside.", timeout=15000
        )
        expect(browser.locator(".product.shown")).to_have_id("kathmandu")
        assert browser.evaluate("document.documentElement.dataset.theme") == "dark"
    assert errors == []
    second = stub.requests(CHAT)[1].body
    assert tool_result(second, "call_show") == {
        "shown": "kathmandu",
        "name": "Cube Kathmandu Hybrid e-bike",
        "price": 3299,
    }
    assert tool_result(second, "call_theme") == {"theme": "dark"}
