"""The page in static/ speaks RTVI 2.1 in real headless Chromium: it is served 2.1.0, shows
each sentence's spoken progress as the bot's voice plays it, and its keypad presses reach
the conversation. Every model is the OpenAI-compatible stub: no model is loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import expect

from testkit.browser import chromium, open_page
from testkit.openai_stub import OpenAIStub
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e

ANSWER = "Here is the answer you asked for. It comes in two sentences, spoken slowly."


@pytest.fixture(scope="module")
def stub_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    return start_server(**stub.server_settings(telephony_end_digit="#"))


@pytest.mark.timeout(90)
def test_the_page_is_served_2_1_and_shows_spoken_progress(
    stub_server: ServerProcess, stub: OpenAIStub, silence_wav: Path, tmp_path: Path
) -> None:
    stub.reset()
    stub.config.tts_seconds_per_char = 0.04  # about 3 s of voice: progress has time to show
    errors: list[str] = []
    with chromium(silence_wav, tmp_path / "profile") as context:
        page = open_page(context, f"{stub_server.url}/", errors)
        page.evaluate(
            """() => {
                window.seen = [];
                parley.on("message", (m) => window.seen.push(m));
                window.heard = new Set();  // what the caption's heard part showed
                new MutationObserver(() => {
                    for (const el of document.querySelectorAll("#transcript .caption .heard"))
                        if (el.textContent) window.heard.add(el.textContent);
                }).observe(document.getElementById("transcript"),
                           {subtree: true, childList: true, characterData: true});
            }"""
        )
        page.click("#speaker")
        page.click("#connect")
        expect(page.locator("#status")).to_have_attribute("data-state", "connected", timeout=15000)
        ready = page.evaluate("window.seen.find((m) => m.type === 'bot-ready').data")
        assert ready["version"] == "2.1.0"

        stub.script_chat(ANSWER)
        page.fill("#text-input", "Tell me.")
        page.click("#send")
        said = page.locator("#transcript li.bot .said")
        expect(said).to_have_text(ANSWER, timeout=20000)
        expect(page.locator("#transcript li.bot .caption")).to_have_text("")

        outputs = page.evaluate(
            "window.seen.filter((m) => m.type === 'bot-output').map((m) => m.data)"
        )
        statuses = [o["spoken_status"] for o in outputs]
        assert statuses.count("new") == statuses.count("completed") == 2, statuses
        assert statuses.count("in-progress") >= 4, statuses
        heard = page.evaluate("[...window.heard]")
        assert len(heard) >= 4 and all(ANSWER.find(h) >= 0 for h in heard), heard

        stub.script_chat("You pressed twelve.")
        page.evaluate("parley.sendDTMF('12#')")
        expect(said.last).to_have_text("You pressed twelve.", timeout=15000)
        chat = stub.requests("/v1/chat/completions")[-1].body["messages"]
        assert chat[-1] == {"role": "user", "content": "(pressed on the keypad: 12)"}
        refusals = page.evaluate("window.seen.filter((m) => m.type.startsWith('error'))")
        assert refusals == []
        page.click("#disconnect")
        expect(page.locator("#status")).to_have_attribute("data-state", "disconnected")
    assert not errors, errors
    stub.reset()
