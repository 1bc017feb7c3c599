"""The bot's silence as Opus DTX, received by real Chromium: the browser plays out through
it (its samples keep coming, no packet counts as lost), and the answer after it is heard.
With ``PARLEY_AUDIO_DTX=false`` every 20 ms frame is sent, as before."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from testkit.browser import chromium, open_page
from testkit.openai_stub import OpenAIStub
from testkit.server_process import ServerProcess
from testkit.speech import make_speech

pytestmark = pytest.mark.e2e

AUDIBLE = 0.01  # the page's own threshold (RMS of samples in -1..1)
SILENT_SECONDS = 3.0  # of the microphone before the question: the bot is silent then

STATS = """async () => {
  const stats = await window.parley.pc.getStats();
  for (const s of stats.values())
    if (s.type === "inbound-rtp" && s.kind === "audio")
      return {packets: s.packetsReceived, lost: s.packetsLost,
              samples: s.totalSamplesReceived, at: performance.now() / 1000};
  return null;
}"""


@pytest.fixture(scope="module")
def question_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """espeak-ng's question after SILENT_SECONDS of silence, then 2 s more."""
    folder = tmp_path_factory.mktemp("dtx")
    return make_speech(folder, "question", "What is two plus two?", SILENT_SECONDS, 2.0)


@pytest.fixture(scope="module")
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as running:
        yield running


def inbound(page: Page) -> dict[str, Any]:
    stats = page.evaluate(STATS)
    assert stats is not None, "no inbound audio stream in the browser's stats"
    return stats


def bot_peak(page: Page) -> float:
    return float(page.locator("#bot-level").get_attribute("data-peak") or 0)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("dtx", ["true", "false"])
def test_chromium_plays_through_dtx_and_hears_the_answer(
    start_server: Callable[..., ServerProcess],
    stub: OpenAIStub,
    question_wav: Path,
    tmp_path: Path,
    dtx: str,
) -> None:
    server = start_server(**stub.server_settings(audio_dtx=dtx))
    errors: list[str] = []
    with chromium(question_wav, tmp_path / "profile") as context:
        page = open_page(context, f"{server.url}/", errors)
        page.click("#speaker")
        page.click("#connect")
        expect(page.locator("#status")).to_have_attribute("data-state", "connected", timeout=15000)
        page.wait_for_timeout(800)  # past the 200 ms of silence sent before DTX starts
        before = inbound(page)
        page.wait_for_timeout(1500)  # the caller is still silent: so is the bot
        after = inbound(page)
        seconds = after["at"] - before["at"]
        rate = (after["packets"] - before["packets"]) / seconds
        played = (after["samples"] - before["samples"]) / seconds
        print(
            f"dtx={dtx}: {rate:.1f} packets/s, {played:.0f} samples/s played, lost {after['lost']}"
        )
        if dtx == "true":
            assert rate < 10, "silence as DTX: a packet every 400 ms or so, not 50 a second"
        else:
            assert rate > 40, "every 20 ms frame is sent"
        assert played > 0.8 * 48000, "the browser plays out through the silence, as ever"
        assert after["lost"] == 0, "a DTX gap is no loss"

        deadline = time.monotonic() + 30
        while bot_peak(page) <= AUDIBLE and time.monotonic() < deadline:
            page.wait_for_timeout(200)
        assert bot_peak(page) > AUDIBLE, "the answer after the silence is heard"
        expect(page.locator("#transcript li.bot")).not_to_have_count(0)
        assert inbound(page)["lost"] == 0
        page.click("#disconnect")
    assert not errors
