"""The servers a load bench runs against: Parley, or a Pipecat bot in its own venv, both
with every model service at the OpenAI-compatible stub."""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

import httpx

from testkit.openai_stub import OpenAIStub
from testkit.openai_stub.process import StubProcess
from testkit.server_process import ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
PIPECAT_PYTHON = ROOT / "bench" / ".venv-pipecat" / "bin" / "python"
PIPECAT_BOT = ROOT / "bench" / "pipecat" / "bot.py"


class PipecatProcess(ServerProcess):
    """bench/pipecat/bot.py in its own venv (see bench/pipecat/README.md): started here,
    stopped (SIGTERM) and logged exactly like the Parley server."""

    def __init__(self, args: argparse.Namespace, base_url: str, api_key: str, log_path: Path):
        if not PIPECAT_PYTHON.exists():
            raise RuntimeError(f"{PIPECAT_PYTHON} missing: see bench/pipecat/README.md")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = log_path.open("w")
        cmd = [str(PIPECAT_PYTHON), str(PIPECAT_BOT), "--port", str(self.port),
               "--base-url", base_url, "--api-key", api_key,
               "--vad-stop-secs", str(args.vad_stop_secs),
               "--user-speech-timeout", str(args.user_speech_timeout),
               "--stop", getattr(args, "pipecat_stop", "speech-timeout")]  # fmt: skip
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pipecat bot exited at start:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"pipecat bot did not start:\n{self.log()}")


def start_stub(
    args: argparse.Namespace, answer: str, transcript: str, process: bool = False
) -> OpenAIStub | StubProcess:
    """The model stub with the run's fixed delays; in a process of its own if ``process``
    (see :mod:`testkit.openai_stub.process`)."""
    fields = {
        "stt_delay": args.stt_delay,
        "first_token_delay": args.llm_delay,
        "tts_first_audio_delay": args.tts_delay,
        "tts_seconds_per_char": args.tts_seconds_per_char,
        "default_text": answer,
        "transcript": transcript,
        "tts_voice": getattr(args, "bot_voice", "buzz"),
    }
    if process:
        return StubProcess(fields)
    stub = OpenAIStub().start()
    for name, value in fields.items():
        setattr(stub.config, name, value)
    return stub


def start_target(
    target: str,
    args: argparse.Namespace,
    stub: OpenAIStub | StubProcess,
    log_path: Path,
    env: dict[str, str] | None = None,
) -> ServerProcess:
    """Parley or the Pipecat bot on 127.0.0.1, ready to take offers. ``env``: more
    ``PARLEY_*`` settings. Parley ends turns by ``args.turn_end`` (default: the fixed
    window, which the load figures' server-added formula assumes)."""
    if target == "pipecat":
        return PipecatProcess(args, stub.base_url, stub.api_key, log_path)
    extra = env
    env = {
        "PARLEY_LOG_LEVEL": "INFO", "PARLEY_PRELOAD_MODELS": "true", "PARLEY_GREETING": "",
        "PARLEY_STT": "openai", "PARLEY_LLM": "openai", "PARLEY_TTS": "openai",
        "PARLEY_OPENAI_BASE_URL": stub.base_url, "PARLEY_OPENAI_API_KEY": stub.api_key,
        "PARLEY_MAX_SESSIONS": str(max(args.users, 20)),
        "PARLEY_VAD_STOP_SECS": str(args.vad_stop_secs),
        "PARLEY_USER_SPEECH_TIMEOUT": str(args.user_speech_timeout),
        "PARLEY_TURN_END": getattr(args, "turn_end", "fixed"),
        **(extra or {}),
    }  # fmt: skip
    server = ServerProcess(env, log_path)
    server.wait_models_ready()
    return server
