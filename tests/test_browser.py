"""The browser client in static/, driven in real headless Chromium with a fake microphone.

Debian's chromium (``/usr/bin/chromium``) and Python Playwright's driver: no browser
download. The fake mic plays a WAV once (``%noloop``) from the moment of getUserMedia.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import wave
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest
from playwright.sync_api import Page, expect

from testkit.browser import chromium, open_page
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e

# RMS (samples in -1..1) above which received bot audio counts as sound: the page's own threshold.
AUDIBLE = 0.01
# How long the spoken question may take to be answered (STT, LLM, TTS on two cores).
ANSWER_WITHIN = 30.0


@pytest.fixture(scope="module")
def question_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """espeak-ng saying the question, with 0.5 s of silence before and 2 s after."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        pytest.fail("espeak-ng is missing: `make test` installs it (apt-get install espeak-ng)")
    folder = tmp_path_factory.mktemp("question")
    raw = folder / "raw.wav"
    subprocess.run([espeak, "-w", str(raw), "What is two plus two?"], check=True)
    with wave.open(str(raw)) as src:
        rate = src.getframerate()
        speech = np.frombuffer(src.readframes(src.getnframes()), dtype=np.int16)
    samples = np.concatenate([np.zeros(rate // 2, np.int16), speech, np.zeros(rate * 2, np.int16)])
    path = folder / "question.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())
    return path


def sessions(server: ServerProcess) -> list[dict]:
    return httpx.get(f"{server.url}/api/sessions", timeout=5).json()["sessions"]


def event_types(page: Page) -> set[str]:
    return set(page.locator("#events li b").all_inner_texts())


def bot_peak(page: Page) -> float:
    return float(page.locator("#bot-level").get_attribute("data-peak") or 0)


@pytest.mark.timeout(90)
def test_conversation_in_the_browser(
    start_server: Callable[..., ServerProcess], question_wav: Path, tmp_path: Path
) -> None:
    """Connect, ask by voice, see and hear the answer, then hang up.

    Every check is recorded and reported together at the end, so one run shows all that
    works and all that does not, and the screenshot is taken either way.
    """
    server = start_server(preload_models="true")
    server.wait_models_ready()  # loading them while we talk would slow the first answer
    started = time.monotonic()
    errors: list[str] = []
    failed: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            failed.append(what)

    with chromium(question_wav, tmp_path / "profile") as context:
        page = open_page(context, f"{server.url}/", errors)
        # Played aloud, the bot's voice feeds Chromium's echo canceller, which eats the fake
        # mic's words wherever the two overlap (a greeting: on by default, off in tests). The
        # page's analyser taps the track itself, so levels and latency are measured the same.
        page.click("#speaker")
        page.click("#connect")
        # connected = bot-ready came back for our client-ready
        expect(page.locator("#status")).to_have_attribute("data-state", "connected", timeout=15000)
        live = sessions(server)
        check(
            len(live) == 1 and live[0]["client"]["library"] == "parley-web",
            f"one session from parley-web on the server: {live}",
        )

        # The question plays (about 2 s), then the answer. Wait for the whole exchange.
        user_line = page.locator("#transcript li.user")
        bot_line = page.locator("#transcript li.bot")
        spoken = page.locator("#transcript li.bot .said")  # from bot-output: played in full
        latency = page.locator("#latency li[data-ms]")
        wanted = {"user-started-speaking", "user-transcription", "bot-started-speaking"}
        deadline = time.monotonic() + ANSWER_WITHIN
        while time.monotonic() < deadline:
            if (
                spoken.count()
                and spoken.first.inner_text().strip()
                and latency.count()
                and wanted <= event_types(page)
                and bot_peak(page) > AUDIBLE
            ):
                break
            page.wait_for_timeout(250)

        users = user_line.all_inner_texts()
        bots = bot_line.all_inner_texts()
        check(
            any(re.search(r"\b(two|2)\s*(plus|\+)\s*(two|2)\b", u, re.I) for u in users),
            f"the transcript shows the question: user lines {users}",
        )
        check(any(b.strip() for b in bots), f"the transcript shows a bot reply: bot lines {bots}")
        said = spoken.all_inner_texts()
        check(any(t.strip() for t in said), f"the bot reply's text was played out: {said}")
        check(bot_peak(page) > AUDIBLE, f"bot audio heard: peak level {bot_peak(page)}")
        seen = event_types(page)
        check(wanted <= seen, f"events panel has {sorted(wanted - seen)}: it shows {sorted(seen)}")
        latencies = page.locator("#latency li").all_inner_texts()
        check(latency.count() > 0, f"a turn latency is shown: {latencies}")

        shot = tmp_path / "parley.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")

        page.click("#disconnect")
        expect(page.locator("#status")).to_have_attribute("data-state", "disconnected")
        gone_at = time.monotonic()
        while sessions(server) and time.monotonic() - gone_at < 2:
            time.sleep(0.05)
        check(not sessions(server), "the session is gone from /api/sessions within 2 s")
        check(
            page.locator("#error").is_hidden(),
            "no error shown: " + page.locator("#error").inner_text(),
        )

    check(not errors, f"no page errors: {errors}")
    print(f"browser conversation test: {time.monotonic() - started:.1f} s")
    assert not failed, "\n".join(failed)


@pytest.mark.timeout(60)
def test_server_full_is_explained(
    start_server: Callable[..., ServerProcess], question_wav: Path, tmp_path: Path
) -> None:
    """With every slot taken, the page says so, with the server's Retry-After."""
    server = start_server(max_sessions="1", retry_after="7")
    errors: list[str] = []
    with chromium(question_wav, tmp_path / "profile") as context:
        first = open_page(context, f"{server.url}/", errors)
        first.click("#connect")
        expect(first.locator("#status")).to_have_attribute("data-state", "connected", timeout=15000)

        second = open_page(context, f"{server.url}/", errors)
        second.click("#connect")
        expect(second.locator("#error")).to_have_text(
            "The server is full, retry in 7 s.", timeout=10000
        )
        expect(second.locator("#error")).to_have_attribute("data-kind", "server-full")
        expect(second.locator("#status")).to_have_attribute("data-state", "error")
        expect(second.locator("#connect")).to_be_enabled()

        # A slot frees up: connecting again works and clears the error.
        first.click("#disconnect")
        expect(first.locator("#status")).to_have_attribute("data-state", "disconnected")
        deadline = time.monotonic() + 5
        while sessions(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        second.click("#connect")
        expect(second.locator("#status")).to_have_attribute(
            "data-state", "connected", timeout=15000
        )
        expect(second.locator("#error")).to_be_hidden()
        second.click("#disconnect")
    # The 503 itself shows up as a failed resource load in the console; nothing else may.
    unexpected = [e for e in errors if "503" not in e]
    assert not unexpected


@pytest.mark.timeout(60)
def test_connection_lost_is_explained(
    server: ServerProcess, question_wav: Path, tmp_path: Path
) -> None:
    """The server hangs up (here: DELETE of the session): the page says the connection is lost."""
    errors: list[str] = []
    with chromium(question_wav, tmp_path / "profile") as context:
        page = open_page(context, f"{server.url}/", errors)
        page.click("#connect")
        expect(page.locator("#status")).to_have_attribute("data-state", "connected", timeout=15000)
        (session,) = sessions(server)
        httpx.delete(f"{server.url}/api/sessions/{session['pc_id']}", timeout=10)
        expect(page.locator("#error")).to_have_text(
            "Connection lost: the server ended the session.", timeout=5000
        )
        expect(page.locator("#status")).to_have_attribute("data-state", "error")
        expect(page.locator("#connect")).to_be_enabled()
    assert not errors
