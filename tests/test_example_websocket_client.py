"""examples/websocket_client/client.py does what docs/websocket.md says: run as a user runs
it (a process of its own), it says a WAV file to a real server over ``/ws`` (the models at
the OpenAI-compatible stub, the VAD and turn-taking real), prints both sides of the call
and writes the agent's voice to a WAV file; a refused call exits 1 with the server's close
code and reason."""

from __future__ import annotations

import subprocess
import sys
import time
import wave
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest

from testkit.openai_stub import OpenAIStub
from testkit.server_process import ROOT, ServerProcess
from testkit.speech import espeak

pytestmark = pytest.mark.e2e

CLIENT = ROOT / "examples" / "websocket_client" / "client.py"
KEY = "k-1"
QUESTION = "When does the pharmacy open?"
ANSWER = "The pharmacy opens at nine."


@pytest.fixture(scope="module")
def served(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    stub.config.default_text = ANSWER
    stub.config.transcript = QUESTION
    stub.config.tts_seconds_per_char = 0.05  # "Hello!": 0.3 s; the answer: 1.35 s
    server = start_server(**stub.server_settings(greeting="Hello!", preload_models="true",
                                                  api_keys=f'["{KEY}"]'))  # fmt: skip
    # /health shows the models only with a key; /ready's status says as much to anyone.
    deadline = time.monotonic() + 120
    while httpx.get(f"{server.url}/ready", timeout=5).status_code != 200:
        assert time.monotonic() < deadline, f"not ready after 120 s:\n{server.log()}"
        time.sleep(0.2)
    return server


@pytest.fixture(scope="module")
def question(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The question as the client wants it: 16 kHz mono 16-bit, after 0.5 s of silence."""
    path = tmp_path_factory.mktemp("client") / "question.wav"
    samples = np.concatenate([np.zeros(8000, np.int16), espeak(QUESTION).astype(np.int16)])
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(samples.tobytes())
    return path


def run_client(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    url = server.url.replace("http://", "ws://") + "/ws"
    command = [sys.executable, str(CLIENT), url, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.timeout(90)
def test_the_client_says_a_wav_file_and_writes_down_the_agents_answer(
    served: ServerProcess, question: Path, tmp_path: Path
) -> None:
    answer = tmp_path / "answer.wav"
    run = run_client(served, str(question), str(answer), "--api-key", KEY, "--listen", "6")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert "agent: Hello!" in lines
    assert lines.index(f"you: {QUESTION}") < lines.index(f"agent: {ANSWER}")
    with wave.open(str(answer)) as heard:
        assert (heard.getframerate(), heard.getnchannels(), heard.getsampwidth()) == (16000, 1, 2)
        seconds = heard.getnframes() / 16000
    assert seconds > 1.5, "the greeting and the answer were written as audio"
    assert f"{seconds:.1f} s of the agent's voice" in run.stdout


@pytest.mark.timeout(60)
def test_a_refused_call_exits_1_with_the_servers_code_and_reason(
    served: ServerProcess, question: Path, tmp_path: Path
) -> None:
    run = run_client(served, str(question), str(tmp_path / "answer.wav"), "--listen", "0")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "refused by the server: HTTP 401" in run.stdout
    assert "an API key is required" in run.stdout
