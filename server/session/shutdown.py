"""Graceful shutdown: on SIGTERM, drain the sessions before the process exits.

1. New sessions are refused (offers and ``/start`` get 503 with ``Retry-After``), ``/ready``
   turns 503 and ``/health`` reports ``draining``; HTTP keeps serving.
2. Every connected client gets an RTVI ``server-message``
   ``{"type": "server-shutdown", "grace_seconds": N}``.
3. Running calls may finish for up to ``shutdown_grace_seconds``; the drain ends as soon
   as the last one has.
4. The remaining sessions are closed (``peerLeft`` first), then uvicorn stops: the
   lifespan's shutdown runs the shutdown hooks (e.g. flushing transcripts) and exits.

A second SIGTERM or SIGINT skips the wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

import uvicorn
from loguru import logger

from server.rtvi import protocol
from server.session.registry import SessionRegistry

# Closing the sessions left after the grace period may take this long, at most.
CLOSE_SECONDS = 3.0
# Each shutdown hook may take this long.
HOOK_SECONDS = 5.0

ShutdownHook = Callable[[], Awaitable[None]]


def shutdown_message(grace_seconds: float) -> dict[str, Any]:
    """The RTVI message that tells a client the server is going away."""
    data = {"type": "server-shutdown", "grace_seconds": grace_seconds}
    return protocol.message("server-message", data)


class Drain:
    """The drain of one app: started once, by :meth:`begin`; ``done`` when it is over."""

    def __init__(self, registry: SessionRegistry, grace_seconds: float) -> None:
        self.registry = registry
        self.grace_seconds = grace_seconds
        self.started_at: float | None = None
        self.done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def draining(self) -> bool:
        return self.started_at is not None

    def begin(self, on_done: Callable[[], None] | None = None) -> None:
        """Start draining (idempotent); ``on_done`` runs once every session is closed."""
        if self._task is not None:
            return
        self.started_at = time.monotonic()
        self.registry.draining = True
        self._task = asyncio.get_running_loop().create_task(self._run(on_done), name="drain")

    async def _run(self, on_done: Callable[[], None] | None) -> None:
        sessions = list(self.registry.sessions.values())
        logger.info(
            "shutting down: {} session(s) may finish for up to {} s",
            len(sessions),
            self.grace_seconds,
        )
        message = shutdown_message(self.grace_seconds)
        for session in sessions:
            session.send(message)
        waiters = [asyncio.ensure_future(s.closed.wait()) for s in sessions]
        if waiters:
            _, pending = await asyncio.wait(waiters, timeout=self.grace_seconds)
            for waiter in pending:
                waiter.cancel()
        if len(self.registry):
            logger.info("grace period over: closing {} session(s)", len(self.registry))
            try:
                async with asyncio.timeout(CLOSE_SECONDS):
                    await self.registry.close_all(
                        "server shutdown", error="the server is shutting down"
                    )
            except TimeoutError:
                logger.warning("{} session(s) did not close in time", len(self.registry))
        self.done.set()
        if on_done is not None:
            on_done()


async def run_shutdown_hooks(hooks: list[ShutdownHook], seconds_each: float = HOOK_SECONDS) -> None:
    """Run each hook in order, each bounded in time; a failure is logged, not raised."""
    for hook in hooks:
        name = getattr(hook, "__qualname__", repr(hook))
        try:
            async with asyncio.timeout(seconds_each):
                await hook()
        except Exception as exc:
            logger.opt(exception=exc).error("shutdown hook {} failed", name)


class GracefulServer(uvicorn.Server):
    """uvicorn's server, except that the first SIGTERM/SIGINT drains the app first.

    The app must keep its :class:`Drain` in ``app.state.drain`` (the lifespan does).
    """

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self.app = app
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_requested = False

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        drain: Drain | None = getattr(self.app.state, "drain", None)
        if drain is None or self._drain_requested or self.should_exit or self._loop is None:
            super().handle_exit(sig, frame)  # not started yet, or a second signal: now
            return
        self._drain_requested = True
        # As uvicorn does: the signal is raised again once the server has stopped. No
        # logging here: a signal handler must not take the logger's lock.
        self._captured_signals.append(sig)
        self._loop.call_soon_threadsafe(drain.begin, self._exit)

    def _exit(self) -> None:
        self.should_exit = True
