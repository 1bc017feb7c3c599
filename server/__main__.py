"""``python -m server``: run Parley with the settings from the environment (and the agent
file ``PARLEY_AGENT`` names, whose settings are defaults the environment overrides)."""

from __future__ import annotations

import sys

import uvicorn
from pydantic import ValidationError

from pipeline.tools.sources.http import check_http_tools
from server.api.app import create_app
from server.api.uvicorn_options import uvicorn_options
from server.ops.logs import configure_logging, redact_uvicorn_logs
from server.session.shutdown import GracefulServer
from server.settings.agent_file import AgentFileError, configured_agent, settings_for

# After the drain, how long uvicorn waits for HTTP requests still running.
HTTP_GRACE_SECONDS = 2


def main() -> None:
    try:
        agent = configured_agent()  # first: its settings are defaults for the rest
        settings = settings_for(agent)
        check_http_tools([*settings.http_tools, *(agent.http_tools if agent else ())])
    except AgentFileError as exc:
        sys.exit(f"parley: {exc}")
    except ValidationError as exc:
        sys.exit(f"parley: invalid settings (PARLEY_* environment variables):\n{exc}")
    except ValueError as exc:  # an HTTP tool's header names a variable that is not set
        sys.exit(f"parley: {exc}")
    configure_logging(settings.log_level, settings.log_json)
    app = create_app(settings, agent=agent)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower() if settings.log_level != "TRACE" else "trace",
        # In JSON mode logging is set up already (uvicorn's loggers go through loguru).
        log_config=None if settings.log_json else uvicorn.config.LOGGING_CONFIG,
        timeout_graceful_shutdown=HTTP_GRACE_SECONDS,
        # Deadlines and caps for slow clients, and whose X-Forwarded-For is believed.
        **uvicorn_options(settings),
    )
    redact_uvicorn_logs()  # after uvicorn.Config, which sets its loggers up
    server = GracefulServer(config, app)
    try:
        server.run()
    except KeyboardInterrupt:  # a SIGINT re-raised once the server has stopped
        pass
    if not server.started:
        sys.exit(3)  # as uvicorn.run: the app did not start


if __name__ == "__main__":
    main()
