"""``GET /health`` (liveness: the event loop answers) and ``GET /ready`` (readiness: this
process can take a new session now; the checks are :mod:`server.api.readiness`)."""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from server import __version__
from server.api.readiness import Readiness
from server.api.signalling import ErrorBody, Registry
from server.ops.process_stats import process_stats

router = APIRouter()


class Health(BaseModel):
    status: Literal["ok", "draining"] = "ok"
    draining: bool = False
    version: str
    uptime_seconds: float
    sessions_active: int
    sessions_total: int
    max_sessions: int
    models: dict[str, Any]
    storage: dict[str, Any] | None = None
    circuits: dict[str, Any] = {}
    process: dict[str, Any] = {}
    open: bool = False  # no API keys: whoever reaches the server may use it
    warning: str | None = None  # open and reachable from the network (see server.api.auth)


@router.get("/health", response_model=Health, tags=["status"])
async def health(request: Request, registry: Registry) -> Health:
    """Liveness: answers as long as the event loop does (``draining`` while shutting down)."""
    draining = registry.draining
    return Health(
        status="draining" if draining else "ok",
        draining=draining,
        version=__version__,
        uptime_seconds=round(time.monotonic() - request.app.state.started, 3),
        sessions_active=len(registry),
        sessions_total=registry.total_created,
        max_sessions=registry.settings.max_sessions,
        models=registry.services.status(),
        storage=request.app.state.store.status(),
        circuits=registry.services.circuits(),
        process=process_stats().as_dict(),
        open=not request.app.state.api_keys.enabled,
        warning=request.app.state.exposure_warning,
    )


class Ready(BaseModel):
    status: Literal["ready"] = "ready"
    checks: dict[str, dict[str, Any]]


@router.get(
    "/ready",
    response_model=Ready,
    responses={503: {"model": ErrorBody, "description": "not ready: the failing checks"}},
    tags=["status"],
)
async def ready(request: Request) -> Any:
    """Readiness: 200 when the models are loaded, the server is not draining and every
    registered check passes; else 503 with the failing checks."""
    readiness: Readiness = request.app.state.readiness
    results = await readiness.run()
    checks = {r.name: r.as_dict() for r in results}
    failing = [r.name for r in results if not r.ok]
    if failing:
        detail = {"failing": failing, "checks": checks}
        return JSONResponse({"error": "not ready", "detail": detail}, status_code=503)
    return Ready(checks=checks)
