"""Loading the agent file (``PARLEY_AGENT``) and the settings it sets.

The reference is a file (``path/to/agent.py``), a module (``package.module``) or either
with the attribute to take (``module:attribute``, ``path/to/agent.py:front_desk``;
default ``agent``). A file is run as a module of its own, its folder put on ``sys.path``
so that it may import the files beside it (a second agent to hand off to, say).

Anything wrong with it stops the start with the file, the line and the reason
(:class:`AgentFileError`): better than a server that starts and answers every call
without the tools its owner wrote.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pipeline.tools.agent import Agent
from server.settings import Settings

ENV_VAR = "PARLEY_AGENT"


class AgentFileError(Exception):
    """The agent file cannot be used; the message names the file, the line and why."""

    def __init__(self, where: str, line: int | None, reason: str) -> None:
        self.where = where
        self.line = line
        self.reason = reason
        at = f"{where}, line {line}" if line else where
        super().__init__(f"agent {at}: {reason}")


def load_agent(reference: str) -> Agent:
    """The :class:`Agent` that ``reference`` names; raises :class:`AgentFileError`."""
    target, _, attribute = reference.strip().partition(":")
    attribute = attribute.strip() or "agent"
    if target.endswith(".py") or os.sep in target or "/" in target:
        path = Path(target).expanduser().resolve()
        module = _run_file(path)
        where = str(path)
    else:
        module = _import(target)
        where = getattr(module, "__file__", None) or target
    agent = getattr(module, attribute, None)
    if agent is None:
        raise AgentFileError(where, None, f"defines no module-level {attribute!r}")
    if not isinstance(agent, Agent):
        kind = type(agent).__name__
        raise AgentFileError(where, None, f"{attribute!r} is a {kind}, not a pipeline.agent.Agent")
    agent.source = where
    return agent


def configured_agent(environ: dict[str, str] | None = None) -> Agent | None:
    """The agent ``PARLEY_AGENT`` names, or None when it is not set."""
    reference = (environ if environ is not None else os.environ).get(ENV_VAR, "").strip()
    return load_agent(reference) if reference else None


def settings_for(agent: Agent | None, **overrides: Any) -> Settings:
    """The settings: ``overrides``, then the environment, then the agent's defaults.

    pydantic-settings gives its init arguments precedence over the environment, so only the
    defaults that no environment variable sets are passed on."""
    if agent is None:
        return Settings(**overrides)
    defaults = agent.setting_defaults()
    unknown = sorted(set(defaults) - set(Settings.model_fields))
    if unknown:
        raise AgentFileError(_where(agent), None, f"settings= names unknown settings: {unknown}")
    environ = {key.upper() for key in os.environ}
    given = {k: v for k, v in defaults.items() if not (_env_names(k) & environ)}
    try:
        return Settings(**{**given, **overrides})
    except ValidationError as exc:
        raise AgentFileError(_where(agent), None, f"invalid settings:\n{exc}") from exc


def _where(agent: Agent) -> str:
    return agent.source or f"{agent.name!r}"


def _env_names(field: str) -> set[str]:
    """The environment variables that set ``field`` (its PARLEY_ name and any aliases)."""
    names = {f"PARLEY_{field}".upper()}
    alias = Settings.model_fields[field].validation_alias
    choices = getattr(alias, "choices", [alias] if isinstance(alias, str) else [])
    names.update(c.upper() for c in choices if isinstance(c, str))
    return names


def _run_file(path: Path) -> Any:
    if not path.is_file():
        raise AgentFileError(str(path), None, "no such file")
    name = f"parley_agent_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise AgentFileError(str(path), None, "not a Python file")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(name, None)
        raise _explained(exc, str(path)) from exc
    return module


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            raise AgentFileError(name, None, "no such module (and not a .py path)") from exc
        raise _explained(exc, name) from exc
    except BaseException as exc:
        raise _explained(exc, name) from exc


def _explained(exc: BaseException, where: str) -> AgentFileError:
    """The file and line at fault: a syntax error's own, else the deepest frame in the
    agent file (or, for a module, the deepest frame of any file)."""
    if isinstance(exc, SyntaxError):
        return AgentFileError(exc.filename or where, exc.lineno, f"syntax error: {exc.msg}")
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if f.filename == where] or frames
    line = mine[-1].lineno if mine else None
    at = mine[-1].filename if mine and not where.endswith(".py") else where
    return AgentFileError(at, line, f"{type(exc).__name__}: {exc}")
