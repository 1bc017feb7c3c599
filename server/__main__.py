"""``python -m server``: run Parley with the settings from the environment."""

from __future__ import annotations

import sys

import uvicorn
from pydantic import ValidationError

from server.api.app import create_app
from server.ops.logs import configure_logging
from server.session.shutdown import GracefulServer
from server.settings import get_settings

# After the drain, how long uvicorn waits for HTTP requests still running.
HTTP_GRACE_SECONDS = 2


def main() -> None:
    try:
        settings = get_settings()
    except ValidationError as exc:
        sys.exit(f"parley: invalid settings (PARLEY_* environment variables):\n{exc}")
    configure_logging(settings.log_level, settings.log_json)
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower() if settings.log_level != "TRACE" else "trace",
        # In JSON mode logging is set up already (uvicorn's loggers go through loguru).
        log_config=None if settings.log_json else uvicorn.config.LOGGING_CONFIG,
        timeout_graceful_shutdown=HTTP_GRACE_SECONDS,
    )
    server = GracefulServer(config, app)
    try:
        server.run()
    except KeyboardInterrupt:  # a SIGINT re-raised once the server has stopped
        pass
    if not server.started:
        sys.exit(3)  # as uvicorn.run: the app did not start


if __name__ == "__main__":
    main()
