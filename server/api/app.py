"""The ASGI application: routes, error shapes, body limit, readiness checks and
middleware; what lives as long as the server is :mod:`server.api.lifespan`'s."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from loguru import logger
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeline.tools.agent import Agent
from pipeline.tools.registry import ToolRegistry
from server import __version__
from server.api import call_sockets, health, history, sessions, signalling, telephony
from server.api.host_check import HostCheck, allowed_hosts
from server.api.lifespan import lifespan
from server.api.phone_admission import PhoneGuards
from server.api.readiness import NotReady, Readiness
from server.guards import auth
from server.ops.metrics import ServerMetrics, add_metrics
from server.rtvi.handler import ClientMessages, add_agent_handlers
from server.session.model_services import Services
from server.session.registry import SessionRegistry
from server.session.shutdown import ShutdownHook
from server.settings import Settings, get_settings
from server.settings.agent_file import load_agent
from server.storage.store import StorageError, TranscriptStore


def find_static_dir(configured: Path | None) -> Path | None:
    """The browser client's folder: as configured, or beside the source tree, or ./static."""
    candidates = [configured] if configured else [
        Path(__file__).resolve().parent.parent / "static",
        Path.cwd() / "static",
    ]  # fmt: skip
    return next((p for p in candidates if p.is_dir()), None)


class BodyLimit:
    """Refuses request bodies over ``limit`` bytes with 413, whether declared or streamed.

    Bodies here are small (SDP, candidates), so the body is read whole before the app
    sees it; that is what lets a streamed body be refused before any route runs.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "DELETE"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = {"error": f"request body larger than {self.limit} bytes", "detail": None}
        await JSONResponse(body, status_code=413)(scope, receive, send)


def _error(status_code: int, error: str, detail: object = None, headers=None) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail}, status_code, headers=headers)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return _error(exc.status_code, str(exc.detail), headers=exc.headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return _error(400, "the request body is not valid JSON")
    detail = [{"loc": e.get("loc"), "msg": e.get("msg"), "type": e.get("type")} for e in errors]
    return _error(422, "the request does not match the expected fields", detail)


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    logger.opt(exception=exc).error("unhandled error on {} {}", request.method, request.url.path)
    return _error(500, "internal server error")


async def _storage_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """A read while the transcript database is out of reach (storage=postgres): 503, come
    back later; the reason (which names the database) goes to the log only."""
    logger.warning("{} {}: {}", request.method, request.url.path, exc)
    return _error(503, "transcript storage unavailable", headers={"Retry-After": "5"})


def _models_loaded(services: Services, preloading: bool) -> None:
    """Readiness check: every model in use is loaded (unless they load on first use)."""
    if preloading and not services.ready:
        states = services.status()["embedded"]
        waiting = {role: s.get("state") for role, s in states.items() if s.get("state") != "ready"}
        raise NotReady(f"models not loaded: {waiting}")


def _accepting(registry: SessionRegistry) -> None:
    """Readiness check: the server is not draining."""
    if registry.draining:
        raise NotReady("the server is shutting down")


def _storage_writable(store: TranscriptStore) -> None:
    """Readiness check: the transcript store's latest write succeeded."""
    status = store.status()
    if not status.get("ok", True):
        raise NotReady(f"transcript storage failing: {status.get('last_error')}")


def _tool_sources_up(services: Services) -> None:
    """Advisory readiness check: every MCP server is connected (a failing one fails its
    tools' calls with an error the LLM reads, not the calls)."""
    failing = services.failing_tool_sources()
    if failing:
        raise NotReady(f"MCP servers failing: {', '.join(failing)}")


def _keys_accepted(services: Services) -> None:
    """Advisory readiness check: no vendor refuses its key (a refused key is the same on
    every replica, so it is reported, not a reason to take this one out of the balancer;
    a fallback may be serving meanwhile)."""
    refused = services.refused_keys()
    if refused:
        raise NotReady("; ".join(f"{role}: {reason}" for role, reason in refused.items()))


def create_app(settings: Settings | None = None, agent: Agent | None = None) -> FastAPI:
    """Build the app; sessions live in ``app.state.registry`` for the app's lifetime.

    ``agent``: the agent every call runs (``PARLEY_AGENT``: loaded here when not given;
    its setting defaults apply only where the settings were built by
    :func:`server.settings.agent_file.settings_for`).

    Hooks for other parts: ``app.state.readiness.add(name, check)`` (``/ready``),
    ``app.state.shutdown_hooks`` (async callables run after every session has closed),
    ``registry.listeners`` (told of each session's start and end).
    """
    settings = settings or get_settings()
    if agent is None and settings.agent:
        agent = load_agent(settings.agent)
    shutdown_hooks: list[ShutdownHook] = []
    app = FastAPI(
        title="Parley",
        version=__version__,
        summary="Realtime voice-agent server: WebRTC signalling, sessions and RTVI.",
        lifespan=lifespan(settings, agent, shutdown_hooks),
    )
    app.state.agent = agent
    # What an app adds before it starts: client-message handlers by ``t`` and tools
    # (e.g. ``ToolSpec(..., client_side=True)``) on top of the built-in ones.
    app.state.client_messages = ClientMessages.with_defaults()
    if agent is not None:
        add_agent_handlers(app.state.client_messages, agent)
    app.state.tools = ToolRegistry()
    app.state.phone_guards = PhoneGuards(settings)  # tokens used, webhooks answered, live calls
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StorageError, _storage_unavailable)
    app.add_exception_handler(Exception, _unexpected_error)
    app.state.readiness = _readiness(app, settings)
    app.state.shutdown_hooks = shutdown_hooks
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    # DNS rebinding: answer only the names the server is known by (server/api/host_check.py).
    hosts = allowed_hosts(settings.allowed_hosts, settings.host, bool(settings.trusted_proxies))
    app.add_middleware(HostCheck, allowed=hosts)
    add_metrics(app, ServerMetrics())
    auth.install(app, [key.get_secret_value() for key in settings.api_keys])
    app.state.exposure_warning = auth.exposure_warning(settings.host, app.state.api_keys.enabled)
    if settings.cors_origins:
        # Outermost, so that preflights and error answers (401, 413) carry CORS headers too.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
            max_age=600,
        )
    _routes(app, settings)
    return app


def _readiness(app: FastAPI, settings: Settings) -> Readiness:
    """The checks of ``/ready``; they read what the lifespan put on ``app.state``, so
    they run only once it has started."""
    readiness = Readiness()
    readiness.add("models", lambda: _models_loaded(app.state.services, settings.preload_models))
    readiness.add("accepting", lambda: _accepting(app.state.registry))
    # A shared database (postgres) down is down for every replica: failing /ready would take
    # them all out of the balancer, while calls run on and their writes wait to be retried.
    shared = settings.storage == "postgres"
    readiness.add("storage", lambda: _storage_writable(app.state.store), advisory=shared)
    readiness.add("tools", lambda: _tool_sources_up(app.state.services), advisory=True)
    readiness.add("keys", lambda: _keys_accepted(app.state.services), advisory=True)
    return readiness


def _routes(app: FastAPI, settings: Settings) -> None:
    """The API's routers, then the browser client at ``/`` (last: it matches any path)."""
    app.include_router(signalling.router)
    app.include_router(health.router)
    app.include_router(sessions.router)
    app.include_router(history.router)
    app.include_router(call_sockets.router)
    app.include_router(telephony.router)
    static_dir = find_static_dir(settings.static_dir)
    if static_dir is None:
        logger.warning("no static/ folder found: the browser client is not served")
    else:
        app.mount("/", StaticFiles(directory=static_dir, html=True), name="static")
