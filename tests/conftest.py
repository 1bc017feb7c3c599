"""Shared fixtures: a real Parley server on 127.0.0.1, and speech audio made by espeak-ng."""

from __future__ import annotations

import gc
import os
import wave
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from pipeline.services.embedded import EmbeddedModels
from server.settings import get_settings
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess, is_setting
from testkit.speech import make_speech


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that starts a server process is an ``e2e`` test: one that uses ``start_server``
    (directly or through another fixture) without the mark stops the run, so that
    ``-m "not e2e"`` stays fast."""
    unmarked = [
        item.nodeid
        for item in items
        if "start_server" in getattr(item, "fixturenames", ())
        and item.get_closest_marker("e2e") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "these tests start a server (start_server) but are not marked e2e "
            "(add pytestmark = pytest.mark.e2e or @pytest.mark.e2e):\n  " + "\n  ".join(unmarked)
        )


def pytest_collection_finish(session: pytest.Session) -> None:
    """Every module imported and every test collected: those objects live as long as the
    run, so the collector stops walking them. A full collection of the whole suite's heap
    stalls the test process's event loop, and with it a real-time client's microphone (an
    echo that comes back late is an echo the canceller cannot match)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def clean_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Apps built in-process read the environment too: none of the developer's settings
    reach them, and their transcripts go to a temporary folder, never the repo's data/.
    A test that wants a setting passes it (``Settings(...)``, ``monkeypatch.setenv``)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [k for k in os.environ if is_setting(k)]:
            patch.delenv(name)
        patch.setenv("PARLEY_DATA_DIR", str(tmp_path_factory.mktemp("data")))
        # The small LLM unless a test asks for Qwen (which joins 1.1 GB and loads slower).
        patch.setenv("PARLEY_EMBEDDED_LLM", "smollm2-135m")
        EmbeddedModels.configure(llm="smollm2-135m")  # for tests using the shared registry
        get_settings.cache_clear()
        yield
    get_settings.cache_clear()
    EmbeddedModels.configure()


@pytest.fixture(scope="module")
def start_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., ServerProcess]]:
    """Start servers with extra settings; every one is stopped when the module ends."""
    servers: list[ServerProcess] = []

    def start(**settings: str) -> ServerProcess:
        env = {f"PARLEY_{k.upper()}": v for k, v in settings.items()}
        log = tmp_path_factory.mktemp("server") / "server.log"
        server = ServerProcess(env, log)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def stub() -> Iterator[OpenAIStub]:
    """An OpenAI-compatible stub of the model services for a test module."""
    with OpenAIStub() as running:
        yield running


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """One server for a test module, with a short liveness timeout."""
    return start_server(liveness_timeout="3")


@pytest.fixture
async def pair(server: ServerProcess) -> AsyncIterator[tuple[RTCTestClient, RTCTestClient]]:
    """Two connected sessions: the first gets abused, the second must not notice."""
    clients = (RTCTestClient(server.url), RTCTestClient(server.url))
    for client in clients:
        await client.connect()
    yield clients
    for client in clients:
        await client.close()


@pytest.fixture(scope="session")
def audio_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audio")


@pytest.fixture(scope="session")
def silence_wav(audio_dir: Path) -> Path:
    """A second of silence, 48 kHz mono: a browser's fake microphone that says nothing."""
    path = audio_dir / "silence.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(48000)
        out.writeframes(b"\0\0" * 48000)
    return path


@pytest.fixture(scope="session")
def speech_wav(audio_dir: Path) -> Path:
    """About 2 s of espeak-ng speech with 0.5 s of silence before and 1.5 s after."""
    return make_speech(
        audio_dir, "hello", "Hello there. This is a test of the Parley voice server."
    )
