"""The UI worker protocol in real headless Chromium: the page describes itself to the agent
(ui-snapshot), and the agent's toast, highlight, fill and click commands take effect in it.

The LLM is the OpenAI-compatible stub, scripted to call the UI tools after a ``send-text``
typed in the page; STT and TTS are the stub too, so no model is loaded.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from testkit.browser import chromium, open_page
from testkit.openai_stub import ChatReply, OpenAIStub, ToolCall
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stub_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    # demo_tools: research_topic, the demo async tool
    return start_server(**stub.server_settings(demo_tools="true"))


def session(server: ServerProcess) -> dict[str, Any]:
    (live,) = httpx.get(f"{server.url}/api/sessions", timeout=5).json()["sessions"]
    return httpx.get(f"{server.url}/api/sessions/{live['pc_id']}", timeout=5).json()


def wait_until(predicate: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.timeout(90)
def test_the_agent_shows_a_toast_highlights_and_fills_in_the_page(
    stub_server: ServerProcess, stub: OpenAIStub, silence_wav: Path, tmp_path: Path
) -> None:
    server = stub_server
    stub.reset()
    errors: list[str] = []
    with chromium(silence_wav, tmp_path / "profile") as context:
        page = open_page(context, f"{server.url}/", errors)
        page.click("#speaker")
        page.click("#connect")
        expect(page.locator("#status")).to_have_attribute("data-state", "connected", timeout=15000)
        wait_until(lambda: session(server)["ui"]["snapshots"] >= 1, 5, "a ui-snapshot arrived")
        save = page.evaluate("parleyUI.refOf(document.getElementById('note-save'))")
        title = page.evaluate("parleyUI.refOf(document.getElementById('note-title'))")
        assert re.fullmatch(r"e\d+", save) and save != title
        size = page.evaluate("JSON.stringify(parleyUI.snapshot()).length")
        print(f"the page's snapshot: {size} bytes")
        assert size < 16 * 1024, "well under the data channel's 64 KiB message limit"

        calls = (
            ToolCall("show_toast", {"title": "Hello from Parley", "description": "A toast."}),
            ToolCall("navigate", {"view": "notes"}),
            ToolCall("highlight_element", {"ref": save, "duration_ms": 20000}),
            ToolCall("fill_field", {"ref": title, "value": "Buy milk"}),
            ToolCall("click_element", {"ref": save}),
        )
        stub.script_chat(ChatReply("Here you go.", calls), "Done.")
        page.fill("#text-input", "Show me the notes.")
        page.press("#text-input", "Enter")
        asked = time.monotonic()

        toast = page.locator("#toasts .toast")
        expect(toast).to_contain_text("Hello from Parley", timeout=15000)
        print(f"send-text → toast shown: {1000 * (time.monotonic() - asked):.0f} ms")
        expect(toast).to_contain_text("A toast.")
        expect(page.locator("#note-save")).to_have_class(re.compile(r"\bui-highlight\b"))
        expect(page.locator("#notes")).to_have_class(re.compile(r"\bui-current-view\b"))
        assert page.evaluate("location.hash") == "#notes"
        # Filled in, then saved by the agent's click (the form clears its fields).
        expect(page.locator("#note-list li")).to_have_text(["Buy milk"])
        expect(page.locator("#note-title")).to_have_value("")
        page.screenshot(path=str(tmp_path / "ui.png"), full_page=True)

        # What the LLM saw: the page as a <ui_state> outline with those refs.
        request = stub.requests("/v1/chat/completions")[0].body
        (state,) = [m["content"] for m in request["messages"] if "<ui_state>" in m["content"]]
        print(f"<ui_state>: {len(state)} characters")
        assert f'[{save}] button "Save note"' in state
        assert f'[{title}] textbox "Title"' in state
        assert 'region "Notes" view="notes"' in state
        assert 'status "Connected"' in state and 'combobox "Microphone"' in state
        assert "bot-ready" not in state, "the event log's entries are not described"

        # The click went back to the server as a ui-event, and the saved note in a snapshot
        # (how many snapshots that took depends on how the commands fell in the page's
        # 400 ms throttle: what counts is that the next answer sees the note).
        wait_until(lambda: session(server)["ui"]["events"] >= 1, 5, "the click reached the server")
        wait_until(lambda: session(server)["ui"]["snapshots"] >= 2, 5, "a newer snapshot")
        time.sleep(0.6)  # longer than the throttle: the last change has been sent
        stub.script_chat("Noted.")
        page.fill("#text-input", "What did you do?")
        page.press("#text-input", "Enter")
        wait_until(lambda: len(stub.requests("/v1/chat/completions")) >= 3, 5, "a third request")
        last = stub.requests("/v1/chat/completions")[2].body
        (state,) = [m["content"] for m in last["messages"] if "<ui_state>" in str(m.get("content"))]
        assert "Buy milk" in state, state
        expect(page.locator("#error")).to_be_hidden()
        page.click("#disconnect")
    stub.reset()
    assert not errors, errors


@pytest.mark.timeout(60)
def test_job_groups_are_listed_and_cancelled_from_the_page(
    stub_server: ServerProcess, stub: OpenAIStub, silence_wav: Path, tmp_path: Path
) -> None:
    stub.reset()
    calls = (
        ToolCall("research_topic", {"topic": "owls"}),
        ToolCall("research_topic", {"topic": "bats"}),
    )
    stub.script_chat(ChatReply("", calls), "Stopped.")
    errors: list[str] = []
    with chromium(silence_wav, tmp_path / "profile") as context:
        page = open_page(context, f"{stub_server.url}/", errors)
        page.click("#speaker")
        page.click("#connect")
        expect(page.locator("#status")).to_have_attribute("data-state", "connected", timeout=15000)
        page.fill("#text-input", "Research owls and bats.")
        page.press("#text-input", "Enter")
        group = page.locator("#jobs li").first
        expect(group.locator(".job")).to_have_text(["research_topic-1", "research_topic-2"])
        expect(group.locator("b")).to_have_text("research_topic")
        group.locator("button", has_text="Cancel").click()
        expect(group).to_have_class(re.compile(r"\bdone\b"), timeout=5000)
        for chip in group.locator(".job").all():
            expect(chip).to_have_attribute("data-status", "cancelled")
        expect(group.locator("button")).to_have_count(0)
        expect(page.locator("#error")).to_be_hidden()
        page.click("#disconnect")
    stub.reset()
    assert not errors, errors
