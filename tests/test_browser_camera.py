"""The browser client shares its camera: real headless Chromium with its fake camera (a
640 x 480 test pattern), a Parley server whose LLM sees (the OpenAI-compatible stub), and
the picture of a typed turn in the request body the stub recorded."""

from __future__ import annotations

import base64
import time
import wave
from collections.abc import Callable
from pathlib import Path

import av
import httpx
import pytest
from playwright.sync_api import Page, expect

from testkit.browser import chromium, open_page
from testkit.openai_stub import OpenAIStub
from testkit.server_process import ServerProcess

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def silence(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The microphone: 10 s of silence (no turn of its own to muddle the requests)."""
    path = tmp_path_factory.mktemp("mic") / "silence.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(48000)
        out.writeframes(bytes(2 * 48000 * 10))
    return path


def camera_decoded(server: ServerProcess) -> int:
    sessions = httpx.get(f"{server.url}/api/sessions", timeout=5).json()["sessions"]
    return sum(((s.get("video") or {}).get("camera") or {}).get("decoded", 0) for s in sessions)


def wait_until(check: Callable[[], bool], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def connect(page: Page) -> None:
    page.get_by_test_id("connect").click()
    expect(page.get_by_test_id("status")).to_have_attribute(
        "data-state", "connected", timeout=15000
    )


@pytest.mark.timeout(90)
def test_the_page_shares_its_camera_with_an_llm_that_sees(
    start_server: Callable[..., ServerProcess], silence: Path, tmp_path: Path
) -> None:
    errors: list[str] = []
    with OpenAIStub() as stub:
        server = start_server(
            **stub.server_settings(llm_vision="true", vision_every_turn="true", turn_end="fixed")
        )
        with chromium(silence, tmp_path / "profile") as context:
            page = open_page(context, server.url, errors)
            connect(page)
            camera = page.get_by_test_id("camera")
            expect(camera).to_be_enabled()
            camera.click()
            expect(camera).to_have_attribute("aria-pressed", "true")
            expect(page.get_by_test_id("camera-preview")).to_be_visible()
            assert wait_until(lambda: camera_decoded(server) >= 1, 15), "no picture arrived"
            page.get_by_test_id("text-input").fill("What do you see?")
            page.get_by_test_id("text-input").press("Enter")
            assert wait_until(lambda: bool(stub.requests(CHAT)), 15), "the LLM was not asked"
            user = stub.requests(CHAT)[0].body["messages"][-1]
            camera.click()  # and stop sharing
            expect(camera).to_have_attribute("aria-pressed", "false")
    assert user["content"][0] == {"type": "text", "text": "What do you see?"}
    url = user["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    jpeg = base64.b64decode(url.split(",", 1)[1])
    frame = av.CodecContext.create("mjpeg", "r").decode(av.Packet(jpeg))[0]
    assert (frame.width, frame.height) == (512, 384)  # Chromium's 640 x 480, bounded
    assert errors == []


@pytest.mark.timeout(60)
def test_the_camera_button_stays_off_when_the_llm_cannot_see(
    start_server: Callable[..., ServerProcess], silence: Path, tmp_path: Path
) -> None:
    errors: list[str] = []
    server = start_server()  # the embedded LLM: video answered inactive
    with chromium(silence, tmp_path / "profile") as context:
        page = open_page(context, server.url, errors)
        connect(page)
        expect(page.get_by_test_id("camera")).to_be_disabled()
        expect(page.get_by_test_id("screen")).to_be_disabled()
    assert errors == []
