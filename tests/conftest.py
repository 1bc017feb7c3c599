"""Shared fixtures: a real Parley server on 127.0.0.1, and speech audio made by espeak-ng."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import wave
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import av
import httpx
import numpy as np
import pytest

from server.settings import get_settings
from tests.openai_stub import OpenAIStub
from tests.rtc_client import RTCTestClient

ROOT = Path(__file__).resolve().parent.parent
# What the settings read from the environment besides PARLEY_* (see server/settings.py).
_SETTINGS_ALIASES = ("OPENAI_API_KEY", "OPENAI_BASE_URL")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def is_setting(name: str) -> bool:
    """Whether an environment variable is read by Parley's settings."""
    return name.startswith("PARLEY_") or name in _SETTINGS_ALIASES


def server_env(env: dict[str, str], port: int, data_dir: Path) -> dict[str, str]:
    """The environment of a test server: this one without the developer's settings, the
    test defaults, then ``env`` (what the test passes explicitly)."""
    return {
        **{k: v for k, v in os.environ.items() if not is_setting(k)},
        "PARLEY_HOST": "127.0.0.1",
        "PARLEY_PORT": str(port),
        "PARLEY_LOG_LEVEL": "DEBUG",
        # Tests about signalling and sessions need no models: load them only on use,
        # and do not greet (a greeting would load the TTS).
        "PARLEY_PRELOAD_MODELS": "false",
        "PARLEY_GREETING": "",
        # Each server keeps its transcripts beside its log (never in the repo's data/).
        "PARLEY_DATA_DIR": str(data_dir),
        # Stopping a test server does not wait long for sessions to end by themselves.
        "PARLEY_SHUTDOWN_GRACE_SECONDS": "2",
        # Every test client comes from 127.0.0.1: no per-address limit on new sessions
        # unless a test sets one (tests/test_limits.py).
        "PARLEY_SESSION_RATE_PER_MINUTE": "0",
        **env,
    }


class ServerProcess:
    """``python -m server`` in a subprocess, with its log kept for failed tests."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server"],
            cwd=ROOT,
            env=server_env(env, self.port, log_path.parent / "data"),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.launched_at = time.time()  # the process exists by now
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.close()
                raise RuntimeError(f"server exited at start:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"server did not start:\n{self.log()}")

    def wait_models_ready(self, within: float = 120.0) -> None:
        """Block until /health says every model in use is loaded."""
        deadline = time.monotonic() + within
        while not httpx.get(f"{self.url}/health", timeout=5).json()["models"]["ready"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"models not ready after {within} s:\n{self.log()}")
            time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        """SIGTERM, as a container runtime would; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def metric(server: ServerProcess, name: str) -> float:
    """The sum of a metric's samples on the server's ``/metrics`` (0 when absent); ``name``
    may carry labels: ``parley_bot_pauses_total{outcome="resumed"}``."""
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    pattern = rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$"
    return sum(float(v) for v in re.findall(pattern, text, re.M))


@pytest.fixture(scope="session", autouse=True)
def clean_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Apps built in-process read the environment too: none of the developer's settings
    reach them, and their transcripts go to a temporary folder, never the repo's data/.
    A test that wants a setting passes it (``Settings(...)``, ``monkeypatch.setenv``)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [k for k in os.environ if is_setting(k)]:
            patch.delenv(name)
        patch.setenv("PARLEY_DATA_DIR", str(tmp_path_factory.mktemp("data")))
        get_settings.cache_clear()
        yield
    get_settings.cache_clear()


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


@asynccontextmanager
async def checked_client(url: str, stub: OpenAIStub) -> AsyncIterator[RTCTestClient]:
    """A connected client on a fresh stub; on a clean exit every RTVI message it got must
    have passed the protocol's models."""
    stub.reset()
    connected = RTCTestClient(url)
    try:
        await connected.connect()
        yield connected
        connected.assert_valid_rtvi()
    finally:
        await connected.close()
        stub.reset()


@pytest.fixture
async def pair(server: ServerProcess) -> AsyncIterator[tuple[RTCTestClient, RTCTestClient]]:
    """Two connected sessions: the first gets abused, the second must not notice."""
    clients = (RTCTestClient(server.url), RTCTestClient(server.url))
    for client in clients:
        await client.connect()
    yield clients
    for client in clients:
        await client.close()


def _write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.astype(np.int16).tobytes())


def to_48k(samples: np.ndarray, rate: int) -> np.ndarray:
    """Mono int16 audio resampled to 48 kHz."""
    frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="s16", layout="mono", rate=48000)
    out = [
        f.to_ndarray().reshape(-1) for f in [*resampler.resample(frame), *resampler.resample(None)]
    ]
    return np.concatenate(out)


def make_speech(
    folder: Path, name: str, text: str, before: float = 0.5, after: float = 1.5
) -> Path:
    """An espeak-ng WAV of ``text``, padded with silence (seconds) before and after."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        pytest.fail("espeak-ng is missing: `make test` installs it (apt-get install espeak-ng)")
    raw = folder / f"{name}.raw.wav"
    subprocess.run([espeak, "-s", "160", "-w", str(raw), text], check=True)
    with wave.open(str(raw)) as src:
        speech = to_48k(np.frombuffer(src.readframes(src.getnframes()), dtype=np.int16),
                        src.getframerate())  # fmt: skip
    rate = 48000  # what browsers send; one rate for every file a test client plays
    # espeak pads its clips; trim them so the silences around the speech are exact.
    loud = np.flatnonzero(np.abs(speech.astype(np.int32)) > 300)
    if loud.size:
        speech = speech[loud[0] : loud[-1] + 1]
    silence = [np.zeros(int(rate * s), np.int16) for s in (before, after)]
    path = folder / f"{name}.wav"
    _write_wav(path, np.concatenate([silence[0], speech, silence[1]]), rate)
    return path


@pytest.fixture(scope="session")
def audio_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audio")


@pytest.fixture(scope="session")
def speech_wav(audio_dir: Path) -> Path:
    """About 2 s of espeak-ng speech with 0.5 s of silence before and 1.5 s after."""
    return make_speech(
        audio_dir, "hello", "Hello there. This is a test of the Parley voice server."
    )
