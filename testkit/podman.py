"""Debian's rootful podman as ``make container-test`` configures it (tests/container_test.sh):
runc as the runtime (crun refuses this machine's cgroups), lower ulimits, cgroupfs, and its
own storage folder holding the images that script built. For ``make kube-test``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

# tests/container_test.sh's defaults: its storage folder and the images it builds there.
STATE = Path(os.environ.get("PARLEY_CONTAINER_STATE", "/var/tmp/parley-container"))
IMAGE = os.environ.get("PARLEY_IMAGE", "localhost/parley:test")
TURN_IMAGE = "localhost/parley-turn:test"


class PodmanError(RuntimeError):
    """A podman command failed; the message has its command line and its stderr."""


class Podman:
    """``podman`` with the configuration in ``state`` (containers.conf, storage.conf)."""

    def __init__(self, state: Path = STATE) -> None:
        conf, storage = state / "containers.conf", state / "storage.conf"
        missing = [str(p) for p in (conf, storage) if not p.is_file()]
        if missing:
            raise PodmanError(f"{', '.join(missing)} missing: run `make container-test` first")
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        env = [f"CONTAINERS_CONF={conf}", f"CONTAINERS_STORAGE_CONF={storage}"]
        self.command = [*sudo, "env", *env, "podman"]

    def run(
        self, *args: str, stdin: bytes | None = None, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*self.command, *args],
            input=stdin.decode() if stdin is not None else None,
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise PodmanError(f"podman {' '.join(args)}: exit {proc.returncode}: {proc.stderr}")
        return proc

    async def run_async(self, *args: str, within: float) -> tuple[int, str, str]:
        """``podman ARGS`` without blocking the loop: exit status, stdout, stderr."""
        proc = await asyncio.create_subprocess_exec(
            *self.command, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), within)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    def version(self) -> str:
        return self.run("--version").stdout.strip()

    def image_exists(self, image: str) -> bool:
        return self.run("image", "exists", image, check=False).returncode == 0

    def inspect(self, name: str) -> dict[str, Any]:
        """``podman inspect NAME`` (a container), as data."""
        return json.loads(self.run("inspect", name).stdout)[0]

    def pod_ip(self, pod: str) -> str:
        """The pod's address on its network (that of its infra container)."""
        infra = self.run("pod", "inspect", "--format", "{{.InfraContainerID}}", pod).stdout
        networks = self.inspect(infra.strip())["NetworkSettings"]["Networks"]
        (address,) = {n["IPAddress"] for n in networks.values()}
        return str(address)

    def volume_path(self, volume: str) -> Path:
        return Path(
            self.run("volume", "inspect", "--format", "{{.Mountpoint}}", volume).stdout.strip()
        )

    def remove(self, pods: list[str], volumes: list[str], secrets: list[str]) -> None:
        """Remove what a run made (or a run before it left), whichever of it exists."""
        for pod in pods:
            self.run("pod", "rm", "--force", "--time", "0", pod, check=False, timeout=60)
        for volume in volumes:
            self.run("volume", "rm", "--force", volume, check=False)
        for secret in secrets:
            self.run("secret", "rm", secret, check=False)
