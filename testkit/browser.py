"""Headless Chromium (Debian's) driven by Playwright, with a WAV file as its microphone."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, ConsoleMessage, Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"


FLAGS = [
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium(wav: Path, profile: Path) -> Iterator[BrowserContext]:
    """Headless Chromium with a fresh profile and ``wav`` as the microphone."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            # Playwright mutes audio by default; the page must play the bot's voice.
            ignore_default_args=["--mute-audio"],
            args=[*FLAGS, f"--use-file-for-fake-audio-capture={wav.resolve()}%noloop"],
        )
        try:
            yield context
        finally:
            context.close()


def open_page(context: BrowserContext, url: str, errors: list[str]) -> Page:
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))

    def console(m: ConsoleMessage) -> None:
        if m.type == "error":
            errors.append(f"console: {m.text}")

    page.on("console", console)
    page.goto(url)
    return page
