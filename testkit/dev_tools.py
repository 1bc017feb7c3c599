"""The dev extra's command-line checkers (hadolint, check-jsonschema, …), run from this venv."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testkit.server_process import ROOT

BIN = Path(sys.executable).parent


def run_dev_tool(name: str, *args: str) -> None:
    """Run ``name`` from the venv's ``bin`` in the repository root; fail with its output
    unless it exits 0."""
    tool = BIN / name
    if not tool.exists():
        pytest.fail(f"{tool} is missing; install the dev extra (make install-dev)")
    proc = subprocess.run(
        [str(tool), *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
