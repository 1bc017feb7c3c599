"""HAProxy in front of Parley replicas on 127.0.0.1: ``deploy/haproxy/haproxy.cfg`` run as
shipped, its addresses from the environment, its request log kept and parsed, its stats
read. HAProxy comes from Debian (``apt-get install haproxy``; ``make scale-test`` does it)."""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from testkit.server_process import free_port

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"

# One line of the config's log-format: HAProxy's httplog plus "owner=<replica or ->".
LOG_LINE = re.compile(
    r"^\S+ \[[^\]]+\] \S+ (?P<backend>[^/\s]+)/(?P<server>\S+) \S+ (?P<status>-?\d+) \d+ "
    r"(?P<term>\S+) \S+/\S+/\S+/\S+/(?P<retries>\+?\d+) \S+ owner=(?P<owner>\S+) "
    r'"(?P<method>\S+) (?P<path>\S+)'
)


def haproxy_binary() -> str:
    """The ``haproxy`` executable (Debian installs it in /usr/sbin, not always on PATH)."""
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        raise RuntimeError("haproxy is missing: apt-get install haproxy (make scale-test does)")
    return found


def replica_env(addresses: dict[str, str]) -> dict[str, str]:
    """The config's replica settings: ``{"r1": "127.0.0.1:7861"}`` → ``R1_ADDR=...``."""
    return {f"{replica.upper()}_ADDR": address for replica, address in addresses.items()}


def check_config(env: dict[str, str], config: Path = CONFIG) -> subprocess.CompletedProcess[str]:
    """``haproxy -c`` on the config with ``env`` added to this environment."""
    return subprocess.run(
        [haproxy_binary(), "-c", "-f", str(config)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@dataclass(frozen=True)
class LoggedRequest:
    """One request as HAProxy logged it: where it went and what came back."""

    backend: str
    server: str
    status: int
    term: str  # the termination state: "----" when all went well, "SC--": no server
    owner: str  # the replica id read from the request; "-" when none
    method: str
    path: str
    retries: str  # "+1" when redispatched to another server


class HAProxyProcess:
    """``haproxy -db -f deploy/haproxy/haproxy.cfg`` on free ports, in front of ``replicas``
    (``{"r1": "127.0.0.1:PORT", ...}``); its log (stdout) goes to ``log_path``."""

    def __init__(self, replicas: dict[str, str], log_path: Path, config: Path = CONFIG) -> None:
        self.port, self.stats_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.stats_url = f"http://127.0.0.1:{self.stats_port}"
        self.log_path = log_path
        self._log = log_path.open("w")
        env = {
            **os.environ,
            "LB_BIND": f"127.0.0.1:{self.port}",
            "LB_STATS_BIND": f"127.0.0.1:{self.stats_port}",
            **replica_env(replicas),
        }
        self.proc = subprocess.Popen(
            [haproxy_binary(), "-db", "-f", str(config)],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.close()
                raise RuntimeError(f"haproxy exited at start:\n{self.log()}")
            try:
                httpx.get(f"{self.stats_url}/stats", timeout=1).raise_for_status()
                return
            except httpx.HTTPError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"haproxy did not start:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text()

    def requests(self) -> list[LoggedRequest]:
        """Every request logged so far (HAProxy logs each when it ends)."""
        found = (LOG_LINE.match(line) for line in self.log().splitlines())
        return [
            LoggedRequest(
                backend=m["backend"],
                server=m["server"],
                status=int(m["status"]),
                term=m["term"],
                owner=m["owner"],
                method=m["method"],
                path=m["path"],
                retries=m["retries"],
            )
            for m in found
            if m is not None
        ]

    def servers(self) -> dict[tuple[str, str], dict[str, str]]:
        """The stats CSV's server rows by (backend, server): ``status`` (UP, DOWN, ...),
        ``stot`` (requests sent), ``scur`` (in flight) and the rest."""
        text = httpx.get(f"{self.stats_url}/stats;csv", timeout=5).raise_for_status().text
        rows = csv.DictReader(io.StringIO(text.removeprefix("# ")))
        return {
            (row["pxname"], row["svname"]): row
            for row in rows
            if row["svname"] not in ("FRONTEND", "BACKEND")
        }

    def status(self, backend: str, server: str) -> str:
        """A server's state in a backend: ``UP``, ``DOWN``, ``UP 1/2`` (going down)..."""
        return self.servers()[(backend, server)]["status"]

    def wait_status(self, backend: str, server: str, wanted: str, within: float = 10.0) -> float:
        """Wait until the server's state is ``wanted``; returns the seconds it took."""
        started = time.monotonic()
        while (state := self.status(backend, server)) != wanted:
            if time.monotonic() - started > within:
                raise TimeoutError(f"{backend}/{server} is {state!r}, not {wanted!r}")
            time.sleep(0.1)
        return time.monotonic() - started

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
