"""Parley replicas behind HAProxy on 127.0.0.1, each with its own ``PARLEY_REPLICA_ID``,
port and data folder, every model service at the OpenAI-compatible stub: what
``make scale-test`` (deploy/scale_test.py) and ``bench/scale_capacity.py`` run.

A :class:`Replica` keeps its port across restarts, as a replacement pod or container
keeps its address and id, so HAProxy (configured once) finds it again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from testkit.haproxy import CONFIG, HAProxyProcess
from testkit.openai_stub import OpenAIStub
from testkit.server_process import ROOT, free_port, server_env


class Replica:
    """``python -m server`` as replica ``replica_id`` on a fixed port; (re)started by
    :meth:`start`, which waits for ``/ready``."""

    def __init__(self, replica_id: str, folder: Path, env: dict[str, str]) -> None:
        self.id = replica_id
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.address = f"127.0.0.1:{self.port}"
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.env = {**env, "PARLEY_REPLICA_ID": replica_id}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        return self.folder / f"server-{self.starts}.log"

    def start(self, within: float = 60.0) -> Replica:
        self.starts += 1
        env = server_env(self.env, self.port, self.folder / "data")
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "server"], cwd=ROOT, env=env, stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + within
        while self.ready_status() != 200:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"replica {self.id} did not get ready:\n{self.log()}")
            time.sleep(0.1)
        return self

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def ready_status(self) -> int | None:
        """``GET /ready``'s status, None when nothing answers."""
        try:
            return httpx.get(f"{self.url}/ready", timeout=2).status_code
        except httpx.HTTPError:
            return None

    def health(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/health", timeout=5).raise_for_status().json()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM: the replica drains (see server/session/shutdown.py)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: the replica dies at once, as on a crash or a lost node."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def wait_exit(self, within: float) -> int:
        assert self.proc is not None
        return self.proc.wait(within)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Cluster:
    """Replicas (``r1``, ``r2`` by default) at ``stub`` and HAProxy in front, started on
    entering and all stopped on leaving, also when a start fails half-way."""

    def __init__(
        self,
        stub: OpenAIStub,
        folder: Path,
        env: dict[str, str] | None = None,
        replica_ids: tuple[str, ...] = ("r1", "r2"),
        balancer: bool = True,
        config: Path = CONFIG,
    ) -> None:
        """``balancer=False``: no HAProxy, :attr:`url` is the first replica's (to measure
        one replica alone). ``config``: HAProxy's configuration."""
        settings = {f"PARLEY_{k.upper()}": v for k, v in stub.server_settings().items()}
        # Models preloaded: /ready, which HAProxy checks, waits for them.
        settings |= {"PARLEY_PRELOAD_MODELS": "true", "PARLEY_LOG_LEVEL": "INFO"}
        self.replicas = {
            rid: Replica(rid, folder / rid, {**settings, **(env or {})}) for rid in replica_ids
        }
        self.folder = folder
        self.balancer = balancer
        self.config = config
        self.haproxy: HAProxyProcess | None = None
        self._stack = ExitStack()

    def __enter__(self) -> Cluster:
        try:
            for replica in self.replicas.values():
                self._stack.callback(replica.stop)
            for replica in self.replicas.values():
                replica.start()
            if not self.balancer:
                return self
            addresses = {rid: r.address for rid, r in self.replicas.items()}
            self.haproxy = HAProxyProcess(addresses, self.folder / "haproxy.log", self.config)
            self._stack.callback(self.haproxy.stop)
            for rid in self.replicas:
                self.haproxy.wait_status("new_sessions", rid, "UP")
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def kill(self) -> None:
        """SIGKILL every process at once: for a run that is being interrupted (from a
        signal handler; no waiting for drains)."""
        procs = [r.proc for r in self.replicas.values()]
        procs.append(self.haproxy.proc if self.haproxy is not None else None)
        for proc in procs:
            if proc is not None and proc.poll() is None:
                proc.kill()

    @property
    def url(self) -> str:
        if self.haproxy is None:
            return next(iter(self.replicas.values())).url
        return self.haproxy.url


def kill_on_signals(cluster: Cluster) -> None:
    """On SIGTERM or SIGINT (a CI runner giving up, Ctrl-C), kill every process of
    ``cluster`` and exit at once: unwinding calls and drains could outlast the runner's
    patience, and processes left behind would hold their ports."""

    def stop(signum: int, _frame: object) -> None:
        cluster.kill()
        print(f"interrupted by signal {signum}: every replica and HAProxy killed", flush=True)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
