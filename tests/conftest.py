"""Shared fixtures: a real Parley server on 127.0.0.1, and speech audio made by espeak-ng."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import wave
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``python -m server`` in a subprocess, with its log kept for failed tests."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        full_env = {
            **os.environ,
            "PARLEY_HOST": "127.0.0.1",
            "PARLEY_PORT": str(self.port),
            "PARLEY_LOG_LEVEL": "DEBUG",
            **env,
        }
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server"],
            cwd=ROOT,
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited at start:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"server did not start:\n{self.log()}")

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
def server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """One server for a test module, with a short liveness timeout."""
    return start_server(liveness_timeout="3")


def _write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.astype(np.int16).tobytes())


@pytest.fixture(scope="session")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 2 s of espeak-ng speech with 0.5 s of silence before and 1.5 s after."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        pytest.fail("espeak-ng is missing: `make test` installs it (apt-get install espeak-ng)")
    folder = tmp_path_factory.mktemp("audio")
    raw = folder / "raw.wav"
    text = "Hello there. This is a test of the Parley voice server."
    subprocess.run([espeak, "-s", "190", "-w", str(raw), text], check=True)
    with wave.open(str(raw)) as src:
        rate = src.getframerate()
        speech = np.frombuffer(src.readframes(src.getnframes()), dtype=np.int16)
    padded = np.concatenate(
        [np.zeros(rate // 2, np.int16), speech, np.zeros(rate * 3 // 2, np.int16)]
    )
    path = folder / "speech.wav"
    _write_wav(path, padded, rate)
    return path
