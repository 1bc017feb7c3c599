"""The house's layout: no import cycles, the pipeline free of the server, nothing importing
the tests, and bench scripts that run from anywhere (without the tests on the path)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.server_process import ROOT

PACKAGES = ("server", "pipeline", "testkit")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports (at the top, inside functions, or for typing only)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    files = [f for package in PACKAGES for f in (ROOT / package).rglob("*.py")]
    graph = {module_name(f): imports(f) for f in files}
    return {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_cycle_finder_finds_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_pipeline_knows_nothing_of_the_server() -> None:
    graph = import_graph()
    leaks = {m: sorted(d for d in deps if d.startswith("server")) for m, deps in graph.items()}
    assert {m: d for m, d in leaks.items() if m.startswith("pipeline") and d} == {}


@pytest.mark.parametrize("folder", ["server", "pipeline", "testkit", "bench", "tests"])
def test_nothing_imports_the_tests(folder: str) -> None:
    offenders = [
        str(f.relative_to(ROOT))
        for f in (ROOT / folder).glob("**/*.py")
        if ".venv" not in f.parts and any(m.split(".")[0] == "tests" for m in imports(f))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "script", ["vad.py", "load.py", "turn_eval.py", "mcp_tools.py", "mcp_memory.py"]
)
def test_bench_scripts_run_from_anywhere(script: str, tmp_path: Path) -> None:
    """``python bench/x.py`` from another folder: only the installed packages on the path."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "usage" in run.stdout


def package_of(module: str) -> str:
    """The package a module belongs to: ``server.api``, ``pipeline.hearing``; a module at the
    top of ``pipeline`` (the orchestrator, the agent) counts as one of its own."""
    parts = module.split(".")
    return ".".join(parts[:2])


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, deps in import_graph().items():
        deps_of = graph.setdefault(package_of(module), set())
        deps_of.update(package_of(d) for d in deps if package_of(d) != package_of(module))
    return graph


def test_no_package_cycles() -> None:
    """Layers, not only modules: no package imports one that imports it back."""
    assert cycles(package_graph()) == []


# The style guide's budget, as a check: modules of about 400 lines, functions under about
# 60 (a longer module is two concepts; a longer function, several steps).
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


def test_modules_and_functions_stay_within_the_size_budget() -> None:
    long_modules, long_functions = [], []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text()
            name = str(path.relative_to(ROOT))
            if text.count("\n") > MAX_MODULE_LINES:
                long_modules.append(name)
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    size = (node.end_lineno or node.lineno) - node.lineno + 1
                    if size > MAX_FUNCTION_LINES:
                        long_functions.append(f"{name}:{node.lineno} {node.name} ({size})")
    assert long_modules == [] and long_functions == []


def test_no_pipeline_module_imports_the_orchestrator() -> None:
    """Feature modules take what they need (a protocol, a callable), never the conversation."""
    graph = import_graph()
    users = sorted(
        m
        for m, deps in graph.items()
        if m.startswith("pipeline.") and "pipeline.conversation" in deps
    )
    assert users == []
