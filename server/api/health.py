"""``GET /health`` (liveness: the event loop answers) and ``GET /ready`` (readiness: this
process can take a new session now; the checks are :mod:`server.api.readiness`).

Both stay open to probes. With API keys set, a caller without one gets only the verdict
(``/health``: status and version; ``/ready``: ready or not): the details name the
database path, upstream error text and live counts (:func:`server.guards.auth.sees_details`).
"""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from server import __version__
from server.api.readiness import Readiness
from server.api.signalling import ErrorBody, Registry
from server.guards.auth import sees_details
from server.process.stats import process_stats

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
    # The recordings folder as its cap's last sweep found it (PARLEY_RECORDING_MAX_BYTES).
    recordings: dict[str, Any] | None = None
    circuits: dict[str, Any] = {}
    tools: dict[str, Any] = {}  # the tool sources: each MCP server's state, the HTTP tools
    process: dict[str, Any] = {}
    open: bool = False  # no API keys: whoever reaches the server may use it
    warning: str | None = None  # open and reachable from the network (see server.guards.auth)


class HealthStatus(BaseModel):
    status: Literal["ok", "draining"] = "ok"
    version: str


@router.get(
    "/health",
    response_model=Health,
    responses={200: {"model": Health | HealthStatus}, 401: {"model": ErrorBody}},
    tags=["status"],
)
async def health(request: Request, registry: Registry) -> Any:
    """Liveness: answers as long as the event loop does (``draining`` while shutting down).
    With API keys set, only ``status`` and ``version`` unless the caller sends a key."""
    draining = registry.draining
    if not sees_details(request):
        brief = HealthStatus(status="draining" if draining else "ok", version=__version__)
        return JSONResponse(brief.model_dump())
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
        recordings=_recordings(request),
        circuits=registry.services.circuits(),
        tools=registry.services.tool_sources_status(),
        process=process_stats().as_dict(),
        open=not request.app.state.api_keys.enabled,
        warning=request.app.state.exposure_warning,
    )


def _recordings(request: Request) -> dict[str, Any] | None:
    folder = getattr(request.app.state, "recordings", None)  # an app built without lifespan
    return folder.status() if folder is not None else None


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
    registered check passes (advisory ones are reported, e.g. ``tools``: which MCP server
    is failing); else 503 with the failing checks. With API keys set, the checks only to
    a caller that sends a key."""
    details = sees_details(request)
    readiness: Readiness = request.app.state.readiness
    results = await readiness.run()
    checks = {r.name: r.as_dict() for r in results}
    failing = [r.name for r in results if not r.ok and not r.advisory]
    if not details:
        if failing:
            return JSONResponse({"error": "not ready", "detail": None}, status_code=503)
        return JSONResponse({"status": "ready"})
    if failing:
        detail = {"failing": failing, "checks": checks}
        return JSONResponse({"error": "not ready", "detail": detail}, status_code=503)
    return Ready(checks=checks)
