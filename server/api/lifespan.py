"""What lives as long as the server: the transcript store, the model services, the session
registry and its drain, and the background tasks (liveness, loop lag, model loading,
transcript purge, the recordings folder's cap). Started before the first request; at
shutdown stopped in the reverse order of need: no new sessions, the sessions closed
(their last turns written), then the store and the models.

Everything built here is published on ``app.state`` (``store``, ``services``,
``registry``, ``drain``, ``started``, ``recordings``) for the routes and the readiness
checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI
from loguru import logger

from pipeline.task_cancel import cancel_and_wait
from pipeline.tools.agent import Agent
from server import __version__
from server.ops.metrics import ServerMetrics
from server.ops.tracing import start_tracing
from server.process.blas_threads import limit_blas_threads
from server.session.model_services import Services, build_services
from server.session.pipeline_params import warm_first_turn
from server.session.registry import SessionRegistry
from server.session.shutdown import Drain, ShutdownHook, run_shutdown_hooks
from server.settings import Settings
from server.storage.backends import open_store
from server.storage.recordings import RecordingDirectory
from server.storage.retention import enforce_cap, keep_capped, keep_purging, purge_expired
from server.storage.store import StorageError, TranscriptStore

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def lifespan(
    settings: Settings, agent: Agent | None, shutdown_hooks: list[ShutdownHook]
) -> Lifespan:
    """The app's lifespan; ``agent`` runs every call; ``shutdown_hooks`` run after every
    session has closed."""

    @contextlib.asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[None]:
        limit_blas_threads()
        recordings = app.state.recordings = RecordingDirectory.of(settings)
        store = await _open_store(settings, recordings)
        days = settings.transcript_retention_days
        background = [
            asyncio.create_task(keep_purging(store, days, recordings), name="purge-transcripts")
        ]
        if settings.recording:  # else no recording grows: the start-up sweep was enough
            capping = keep_capped(recordings)
            background.append(asyncio.create_task(capping, name="cap-recordings"))
        app.state.store = store
        services = build_services(settings, agent)
        for spec in app.state.tools:  # tools the app added (server- or client-side)
            services.tools.register(spec)
        await services.start_tool_sources()
        if settings.preload_models:
            await _load_llm_before_listening(services)
        registry = SessionRegistry(settings, services, app.state.client_messages, store=store)
        app.state.registry = registry
        app.state.services = services
        app.state.started = time.monotonic()
        app.state.drain = Drain(registry, settings.shutdown_grace_seconds)
        metrics: ServerMetrics = app.state.metrics
        metrics.attach(registry, lambda: services.ready, services.turn_scorer)
        tracing = app.state.tracing = start_tracing(settings.trace_text)  # None: OTEL_* unset
        if tracing is not None:
            registry.listeners.append(tracing)
        watcher = asyncio.create_task(registry.watch_liveness(), name="liveness")
        lag = asyncio.create_task(metrics.lag_monitor.run(), name="loop-lag")
        loading = asyncio.create_task(_load_models(services, settings), name="load-models")
        if not settings.preload_models:
            loading.cancel()
        logger.info("parley {} ready on {}:{}", __version__, settings.host, settings.port)
        if app.state.exposure_warning:
            logger.warning("{}", app.state.exposure_warning)
        try:
            yield
        finally:
            registry.draining = True
            await cancel_and_wait([watcher, loading, *background, lag])
            await registry.close_all("server shutdown", error="the server is shutting down")
            if tracing is not None:  # the calls' last spans, exported
                await asyncio.to_thread(tracing.shutdown)
            await run_shutdown_hooks(shutdown_hooks)
            await store.close()  # after the sessions: their last turns and ends are written
            await services.aclose()
            logger.info("all sessions closed")

    return run


async def _open_store(settings: Settings, recordings: RecordingDirectory) -> TranscriptStore:
    """The transcript store, opened, with records past their retention deleted (and
    their recordings), and the recordings folder under its cap."""
    store = open_store(settings)
    try:
        await store.start()
    except StorageError as exc:
        logger.error("{}", exc)
        raise
    await purge_expired(store, settings.transcript_retention_days, recordings)
    await enforce_cap(recordings)
    return store


async def _load_llm_before_listening(services: Services) -> None:
    """Load the embedded LLM before the server listens. llama.cpp holds the GIL while it
    loads a model (measured: the event loop stalled for the whole 14 s load of the 1.1 GB
    Qwen), so loaded later it would freeze /health and every call; before the socket is
    open nothing waits on the loop. Its failure is the background load's to report."""
    embedded = services.embedded
    if embedded is None or not services.uses("llm"):
        return
    started = time.monotonic()
    with contextlib.suppress(Exception):
        await embedded.llm.get()
    logger.info("{} loaded in {:.1f} s", embedded.llm.label, time.monotonic() - started)


async def _load_models(services: Services, settings: Settings) -> None:
    """Load the embedded models at start-up, then warm the first turn's prompt; a failure
    is logged and shown by /health."""
    started = time.monotonic()
    try:
        await services.load()
        loaded = time.monotonic()
        await warm_first_turn(services, settings)
    except Exception as exc:
        logger.error("loading the embedded models failed: {}", exc)
    else:
        logger.info(
            "models ready in {:.1f} s (first turn's prompt read in {:.1f} s)",
            time.monotonic() - started,
            time.monotonic() - loaded,
        )
        freeze_startup_objects()


def freeze_startup_objects() -> None:
    """Move everything start-up made (libraries, models) out of the cyclic collector's
    reach: it lives as long as the process, and otherwise every full collection walks it
    again while sessions wait."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    logger.info(
        "froze {} start-up objects in {:.0f} ms",
        gc.get_freeze_count(),
        1000 * (time.perf_counter() - started),
    )
