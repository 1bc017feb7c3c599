"""A container's startup, liveness and readiness probes run as the kubelet runs them, for
``make kube-test`` (deploy/kube_play_test.py): podman 4.3 runs none of them (it ignores
readiness and startup probes, and turns a liveness probe into a health check that needs
systemd's timers).

The probes are read from the container as written (named ports resolved from its
``ports``). Startup first, until it passes; then liveness and readiness side by side,
each every ``periodSeconds`` with its ``timeoutSeconds``. Ready after ``successThreshold``
passes in a row, not Ready after ``failureThreshold`` failures in a row; a startup or
liveness probe failing ``failureThreshold`` times in a row is a restart the kubelet would
make, recorded in :attr:`Prober.restarts`. Only ``httpGet`` and ``tcpSocket`` (what the
manifests use).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

Obj = dict[str, Any]


@dataclass
class Outcome:
    """One probe run: when (``time.monotonic()``), whether it passed, and what came."""

    at: float
    passed: bool
    detail: str


@dataclass
class ProbeState:
    spec: Obj
    outcomes: list[Outcome] = field(default_factory=list)

    def in_a_row(self, passed: bool) -> int:
        count = 0
        for outcome in reversed(self.outcomes):
            if outcome.passed != passed:
                break
            count += 1
        return count


def port_number(container: Obj, port: int | str) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    by_name = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
    return int(by_name[port])


class Prober:
    """The probes of ``container`` against ``host`` (the pod's address), in a task of its
    own from :meth:`start` until :meth:`stop`."""

    def __init__(self, container: Obj, host: str) -> None:
        self.container = container
        self.host = host
        self.probes = {
            kind: ProbeState(container[f"{kind}Probe"])
            for kind in ("startup", "liveness", "readiness")
            if f"{kind}Probe" in container
        }
        self.ready = False
        self.transitions: list[tuple[float, str]] = []  # (when, "Started" / "Ready" / ...)
        self.restarts: list[str] = []  # what the kubelet would restart the container for
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="prober")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def when(self, event: str, after: float = 0.0) -> float | None:
        """The first time ``event`` happened at or after ``after``."""
        return next((t for t, e in self.transitions if e == event and t >= after), None)

    async def probe(self, spec: Obj) -> Outcome:
        """One run of ``spec``: an HTTP GET that answers 200-399, or a TCP connect."""
        timeout = float(spec.get("timeoutSeconds", 1))
        started = time.monotonic()
        try:
            if "httpGet" in spec:
                get = spec["httpGet"]
                url = f"http://{self.host}:{port_number(self.container, get['port'])}{get['path']}"
                async with httpx.AsyncClient(timeout=timeout) as http:
                    status = (await http.get(url)).status_code
                return Outcome(started, 200 <= status < 400, f"GET {get['path']}: {status}")
            port = port_number(self.container, spec["tcpSocket"]["port"])
            _, writer = await asyncio.wait_for(asyncio.open_connection(self.host, port), timeout)
            writer.close()
            return Outcome(started, True, f"TCP {port}: connected")
        except (httpx.HTTPError, OSError, TimeoutError) as exc:
            return Outcome(started, False, f"{type(exc).__name__}: {exc}")

    async def _loop(self, kind: str, until_passed: bool = False) -> None:
        state = self.probes[kind]
        while True:
            state.outcomes.append(await self.probe(state.spec))
            threshold = int(state.spec.get("failureThreshold", 3))
            if kind == "readiness":
                self._readiness(state)
            elif state.in_a_row(False) >= threshold and not self.restarts:
                self.restarts.append(f"{kind}: {state.outcomes[-1].detail}")
                self.transitions.append((time.monotonic(), f"{kind} restart"))
            if until_passed and state.outcomes[-1].passed:
                return
            await asyncio.sleep(float(state.spec.get("periodSeconds", 10)))

    def _readiness(self, state: ProbeState) -> None:
        now = time.monotonic()
        if not self.ready and state.in_a_row(True) >= int(state.spec.get("successThreshold", 1)):
            self.ready = True
            self.transitions.append((now, "Ready"))
        elif self.ready and state.in_a_row(False) >= int(state.spec.get("failureThreshold", 3)):
            self.ready = False
            self.transitions.append((now, "NotReady"))

    async def _run(self) -> None:
        if "startup" in self.probes:
            await self._loop("startup", until_passed=True)
        self.transitions.append((time.monotonic(), "Started"))
        loops = [self._loop(kind) for kind in ("liveness", "readiness") if kind in self.probes]
        await asyncio.gather(*loops)
