"""Static checks of the container files: hadolint, the compose schema, and key directives."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run_tool(name: str, *args: str) -> None:
    tool = BIN / name
    if not tool.exists():
        pytest.fail(f"{tool} is missing; install the dev extra (make install-dev)")
    proc = subprocess.run(
        [str(tool), *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"


def test_hadolint() -> None:
    run_tool("hadolint", "Dockerfile")


def test_compose_schema() -> None:
    run_tool("check-jsonschema", "--builtin-schema", "vendor.compose-spec", "compose.yaml")


def test_dockerfile_directives() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=\S+", text, re.M), "no ARG BASE_IMAGE with a default"
    assert re.search(r"^FROM \$\{?BASE_IMAGE\}?\s*$", text, re.M), "FROM does not use BASE_IMAGE"
    assert re.search(r"^HEALTHCHECK .*/health", text, re.M | re.S), "no HEALTHCHECK on /health"
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users, "no USER directive"
    assert users[-1].split(":")[0] not in {"root", "0"}, f"runs as root: USER {users[-1]}"
