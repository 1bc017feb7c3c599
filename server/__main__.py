"""``python -m server``: run Parley with the settings from the environment."""

from __future__ import annotations

import sys

import uvicorn
from loguru import logger
from pydantic import ValidationError

from server.app import create_app
from server.settings import get_settings


def main() -> None:
    try:
        settings = get_settings()
    except ValidationError as exc:
        sys.exit(f"parley: invalid settings (PARLEY_* environment variables):\n{exc}")
    logger.remove()
    logger.add(sys.stderr, level=settings.log_level)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower() if settings.log_level != "TRACE" else "trace",
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    main()
