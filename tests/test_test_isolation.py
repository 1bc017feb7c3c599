"""The suite's own hygiene: apps built in-process and test servers never see the
developer's ``PARLEY_*`` (or ``OPENAI_*``) environment, and never write into the
repository's ``./data``; only what a test passes explicitly reaches them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from server.api.app import create_app
from server.settings import Settings
from testkit.server_process import ROOT, server_env

PROBE = "ISOLATION_PROBE"  # not PARLEY_*: it must survive the clean environment
DEFAULT_PROMPT = Settings.model_fields["system_prompt"].default


def in_repository_data(path: Path) -> bool:
    data = (ROOT / "data").resolve()
    path = path.resolve()
    return path == data or data in path.parents


def test_in_process_settings_keep_out_of_the_repository_data_dir() -> None:
    assert not in_repository_data(Settings().data_dir), Settings().data_dir


def test_a_subprocess_server_gets_only_the_settings_a_test_passes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PARLEY_SYSTEM_PROMPT", "from the developer's shell")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-developer")
    env = server_env({"PARLEY_GREETING": "Hi."}, port=7999, data_dir=tmp_path / "data")
    assert "PARLEY_SYSTEM_PROMPT" not in env and "OPENAI_API_KEY" not in env
    assert env["PARLEY_GREETING"] == "Hi." and env["PARLEY_PORT"] == "7999"
    assert env["PARLEY_DATA_DIR"] == str(tmp_path / "data")
    assert env["PATH"] == os.environ["PATH"], "the rest of the environment is kept"


@pytest.mark.e2e
def test_the_developers_environment_does_not_reach_in_process_apps(tmp_path: Path) -> None:
    """A pytest run of its own, started with a developer's settings in its environment."""
    developer_data = tmp_path / "developer-data"
    env = {
        **os.environ,
        PROBE: "1",
        "PARLEY_SYSTEM_PROMPT": "LEAKED from the developer's shell",
        "PARLEY_HOST": "0.0.0.0",
        "PARLEY_DATA_DIR": str(developer_data),
        "OPENAI_API_KEY": "sk-developer",
    }
    probe = f"{Path(__file__).relative_to(ROOT)}::test_probe_in_process_app"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout + run.stderr
    assert not developer_data.exists(), "the developer's data dir was written"


@pytest.mark.skipif(not os.environ.get(PROBE), reason="run by the test above, in its own pytest")
def test_probe_in_process_app() -> None:
    settings = Settings(preload_models=False, greeting="", llm="openai", stt="openai",
                        tts="openai", openai_base_url="http://127.0.0.1:9")  # fmt: skip
    assert settings.system_prompt == DEFAULT_PROMPT
    assert settings.openai_api_key is None and settings.host == "127.0.0.1"
    ours = ("PARLEY_DATA_DIR", "PARLEY_EMBEDDED_LLM")  # conftest's own test defaults
    leaked = sorted(k for k in os.environ if k.startswith("PARLEY_") and k not in ours)
    assert leaked == [] and "OPENAI_API_KEY" not in os.environ
    app = create_app(settings)
    with TestClient(app) as http:
        assert http.get("/health").status_code == 200
        store = Path(app.state.store.status()["path"])
    assert not in_repository_data(store), store
    assert "developer-data" not in str(store)
