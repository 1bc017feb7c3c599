"""``python -m server`` as a subprocess on 127.0.0.1, with the environment of a test server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from pipeline.services.embedded import default_model_dir
from testkit.exposition import parse

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
        # The small embedded LLM unless a test asks for Qwen (1.1 GB, seconds per answer);
        # the joined model files in one folder for every test server (joined once).
        "PARLEY_EMBEDDED_LLM": "smollm2-135m",
        "PARLEY_MODEL_DIR": str(default_model_dir()),
        # Each server keeps its transcripts beside its log (never in the repo's data/).
        "PARLEY_DATA_DIR": str(data_dir),
        # Stopping a test server does not wait long for sessions to end by themselves.
        "PARLEY_SHUTDOWN_GRACE_SECONDS": "2",
        # Every test client comes from 127.0.0.1: no per-address limit on new sessions
        # unless a test sets one (tests/test_limits.py).
        "PARLEY_SESSION_RATE_PER_MINUTE": "0",
        # Nor per-address or per-network caps on sessions (tests/test_signalling_limits.py).
        "PARLEY_MAX_SESSIONS_PER_ADDRESS": "0",
        "PARLEY_MAX_SESSIONS_PER_NETWORK": "0",
        "PARLEY_MAX_PENDING_PER_ADDRESS": "0",
        "PARLEY_MAX_PENDING_PER_NETWORK": "0",
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
        # A preloaded embedded LLM loads before the server listens (Qwen: ~15 s, more when
        # the machine is busy or the first start joins its file).
        deadline = time.monotonic() + 180
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
    may carry labels: ``parley_bot_pauses_total{outcome="resumed"}`` (the samples that have
    them). Read with prometheus_client's parser (:mod:`testkit.exposition`)."""
    return parse(httpx.get(f"{server.url}/metrics", timeout=5).text).total(name)
