"""server/settings/agent_file.py: ``PARLEY_AGENT`` as a path, a module or ``module:attribute``;
a broken file stops the start with its file, line and reason (also through
``python -m server``); the file's settings are defaults the environment overrides."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline.agent import Agent
from server.settings.agent_file import AgentFileError, configured_agent, load_agent, settings_for
from testkit.server_process import ROOT

MINIMAL = '''
from pipeline.agent import Agent

agent = Agent(instructions="You are the front desk of a bike shop.", greeting="Hi! How can I help?")

@agent.tool
async def get_order_status(order_id: str) -> dict:
    """Look up an order.

    Args:
        order_id: The order number the customer reads out.
    """
    return {"status": "shipped"}
'''


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_file_path_loads_its_agent(tmp_path: Path) -> None:
    agent = load_agent(str(write(tmp_path, "desk.py", MINIMAL)))
    assert [spec.name for spec in agent.tools] == ["get_order_status"]
    assert agent.greeting == "Hi! How can I help?"


def test_a_module_and_an_attribute_load_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "shop_agents.py", MINIMAL + "\nreturns = Agent(name='returns')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_agent("shop_agents").name == "agent"
    assert load_agent("shop_agents:returns").name == "returns"
    assert load_agent(f"{tmp_path / 'shop_agents.py'}:returns").name == "returns"


def test_a_file_may_import_the_files_beside_it(tmp_path: Path) -> None:
    write(
        tmp_path,
        "returns_desk.py",
        "from pipeline.agent import Agent\nreturns = Agent(name='r')\n",
    )
    path = write(tmp_path, "front.py", MINIMAL + "\nfrom returns_desk import returns\n")
    load_agent(str(path))


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("from pipeline.agent import Agent\nagent = Agent(\n", 2, "syntax error"),
        ("import no_such_module_here\n", 1, "ModuleNotFoundError"),
        (
            "from pipeline.agent import Agent\nagent = Agent()\n\n@agent.tool\n"
            "async def f(x):\n    '''No hint.'''\n",
            4,
            "needs a type hint",
        ),
        ("x = 1\n", None, "defines no module-level 'agent'"),
        ("agent = 42\n", None, "is a int, not a pipeline.agent.Agent"),
    ],
)
def test_a_broken_file_names_its_line_and_reason(
    tmp_path: Path, text: str, line: int | None, reason: str
) -> None:
    path = write(tmp_path, "broken.py", text)
    with pytest.raises(AgentFileError) as caught:
        load_agent(str(path))
    assert caught.value.line == line
    assert reason in caught.value.reason
    assert str(path) in str(caught.value)


def test_a_missing_file_or_module_is_named() -> None:
    with pytest.raises(AgentFileError, match="no such file"):
        load_agent("/nonexistent/agent.py")
    with pytest.raises(AgentFileError, match="no such module"):
        load_agent("no_such_agent_module")


def test_the_agent_sets_defaults_and_the_environment_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = Agent(
        instructions="Be a bike shop.",
        greeting="Hi!",
        settings={"llm_model": "from-agent", "PARLEY_MAX_SESSIONS": 7, "turn_end": "silence"},
    )
    monkeypatch.delenv("PARLEY_GREETING", raising=False)
    monkeypatch.setenv("PARLEY_MAX_SESSIONS", "3")
    monkeypatch.setenv("PARLEY_TURN_END", "adaptive")
    settings = settings_for(agent)
    assert settings.system_prompt == "Be a bike shop."
    assert settings.greeting == "Hi!"
    assert settings.llm_model == "from-agent"
    assert settings.max_sessions == 3
    assert settings.turn_end == "adaptive"


def test_an_unknown_or_invalid_setting_stops_the_start() -> None:
    with pytest.raises(AgentFileError, match="unknown settings"):
        settings_for(Agent(settings={"no_such_setting": 1}))
    with pytest.raises(AgentFileError, match="max_sessions"):
        settings_for(Agent(settings={"max_sessions": -5}))


def test_parley_agent_unset_means_no_agent() -> None:
    assert configured_agent({}) is None
    assert configured_agent({"PARLEY_AGENT": "  "}) is None


@pytest.mark.e2e
def test_python_m_server_refuses_a_broken_agent_file_with_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.py", "from pipeline.agent import Agent\nagent = Agent(\n")
    env = {"PARLEY_AGENT": str(path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "server"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert f"parley: agent {path}, line 2: syntax error" in done.stderr
    assert "Traceback" not in done.stderr
