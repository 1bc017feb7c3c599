"""Static checks of the container files: hadolint, the compose schema, and key directives."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from testkit.dev_tools import run_dev_tool

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILES = sorted(p.name for p in ROOT.glob("Dockerfile*"))


def test_dockerfiles_found() -> None:
    assert {"Dockerfile", "Dockerfile.turn"} <= set(DOCKERFILES)


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_hadolint(dockerfile: str) -> None:
    run_dev_tool("hadolint", dockerfile)


def test_compose_schema() -> None:
    run_dev_tool("check-jsonschema", "--builtin-schema", "vendor.compose-spec", "compose.yaml")


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_dockerfile_directives(dockerfile: str) -> None:
    text = (ROOT / dockerfile).read_text()
    assert re.search(r"^ARG BASE_IMAGE=\S+", text, re.M), "no ARG BASE_IMAGE with a default"
    assert re.search(r"^FROM \$\{?BASE_IMAGE\}?\s*$", text, re.M), "FROM does not use BASE_IMAGE"
    assert re.search(r"^HEALTHCHECK ", text, re.M), "no HEALTHCHECK"
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users, "no USER directive"
    assert users[-1].split(":")[0] not in {"root", "0"}, f"runs as root: USER {users[-1]}"


def test_agent_image_checks_health_and_owns_data() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^HEALTHCHECK .*/health", text, re.M | re.S), "no HEALTHCHECK on /health"
    assert re.search(r"install -d -o 10001 -g 10001 /data", text), "/data not the user's"
    assert re.search(r"^USER 10001:10001", text, re.M)


def test_compose_services() -> None:
    """The agent keeps /data in a named volume; TURN only runs with its profile."""
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    agent, turn = compose["services"]["parley"], compose["services"]["turn"]
    assert "PARLEY_DATA_DIR=/data" in agent["environment"]
    volume = next(v.split(":")[0] for v in agent["volumes"] if v.endswith(":/data"))
    assert volume in compose["volumes"], f"{volume} is not a named volume"
    assert "profiles" not in agent
    assert turn["profiles"] == ["turn"]
    assert turn["build"]["dockerfile"] == "Dockerfile.turn"
    # Every TURN_* setting compose passes is one the entrypoint reads.
    entrypoint = (ROOT / "turn" / "entrypoint.sh").read_text()
    names = {item.split("=")[0] for item in turn["environment"]}
    assert "TURN_PASSWORD" in names
    assert {n for n in names if f"${{{n}" not in entrypoint} == set()


def run_turn_entrypoint(
    tmp_path: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """turn/entrypoint.sh with a stand-in ``turnserver`` that prints the flags it gets."""
    fake = tmp_path / "turnserver"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    return subprocess.run(
        ["/bin/sh", str(ROOT / "turn" / "entrypoint.sh"), *args],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


def test_turn_entrypoint_refuses_no_password(tmp_path: Path) -> None:
    """Without TURN_PASSWORD the TURN container stops at once with a clear message."""
    proc = run_turn_entrypoint(tmp_path, {})
    assert proc.returncode == 2
    assert "TURN_PASSWORD" in proc.stderr
    assert proc.stdout == "", "turnserver was started"


def test_turn_entrypoint_flags(tmp_path: Path) -> None:
    env = {"TURN_PASSWORD": "pw", "TURN_MIN_PORT": "49100", "TURN_EXTERNAL_IP": "203.0.113.7"}
    proc = run_turn_entrypoint(tmp_path, env, "--verbose")
    assert proc.returncode == 0, proc.stderr
    flags = proc.stdout.splitlines()
    assert flags[0] == "-n", "a config file would override the environment"
    for flag in (
        "--lt-cred-mech",
        "--user=parley:pw",
        "--realm=parley",
        "--listening-port=3478",
        "--min-port=49100",
        "--max-port=49200",
        "--external-ip=203.0.113.7",
        "--verbose",
    ):
        assert flag in flags, f"{flag} missing from {flags}"
    no_ip = run_turn_entrypoint(tmp_path, {"TURN_PASSWORD": "pw"}).stdout.splitlines()
    assert not [f for f in no_ip if f.startswith("--external-ip")]
