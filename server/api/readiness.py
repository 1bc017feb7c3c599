"""Readiness checks for ``GET /ready``: can this process take a new session right now?

Liveness (``/health``) only says the event loop answers. Readiness adds what a load
balancer must know before sending a call: the models are loaded, the server is not
draining, and every check another part registered passes, e.g.::

    app.state.readiness.add("storage", store.check_writable)

A check is a function (sync or async) that returns when all is well and raises when
not; the exception's message is the reason shown.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

# A check that takes longer than this fails (a readiness probe must answer quickly).
CHECK_TIMEOUT = 2.0

Check = Callable[[], Awaitable[None] | None]


class NotReady(Exception):
    """Raised by a check that does not pass; its message says why."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str | None = None
    advisory: bool = False  # shown, but a failure does not make the server unready

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"ok": self.ok, "detail": self.detail}
        if self.advisory:
            out["advisory"] = True
        return out


class Readiness:
    """The named checks of one app, run in order on each ``/ready`` request."""

    def __init__(self) -> None:
        self.checks: list[tuple[str, Check, bool]] = []

    def add(self, name: str, check: Check, *, advisory: bool = False) -> None:
        """Register ``check`` under ``name``, which must be new: the names key ``/ready``'s
        answer, so a second check under a taken name would hide one of the two results.
        An ``advisory`` check is reported but never makes the server unready: what it
        watches (a tool server, say) fails a feature, not the calls, and taking every
        replica out of the balancer for it would fail them all."""
        if not name.strip():
            raise ValueError("a readiness check needs a name")
        if any(taken == name for taken, _check, _advisory in self.checks):
            raise ValueError(f"a readiness check named {name!r} is already registered")
        self.checks.append((name, check, advisory))

    async def run(self) -> list[CheckResult]:
        return [await self._run_one(*entry) for entry in self.checks]

    async def _run_one(self, name: str, check: Check, advisory: bool) -> CheckResult:
        try:
            async with asyncio.timeout(CHECK_TIMEOUT):
                outcome = check()
                if inspect.isawaitable(outcome):
                    await outcome
        except TimeoutError:
            return CheckResult(name, False, f"no answer within {CHECK_TIMEOUT} s", advisory)
        except Exception as exc:
            return CheckResult(name, False, str(exc) or type(exc).__name__, advisory)
        return CheckResult(name, True, advisory=advisory)
