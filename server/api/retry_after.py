"""Refusals that say when to come back: an HTTP error with ``Retry-After``.

A full or draining server answers 503 (``PARLEY_RETRY_AFTER`` seconds), a client that
opens sessions too fast 429 (until its rate limit has room again); one builder, so the
header is always whole seconds rounded up (it takes no fraction, and a client that came
back early would only be refused again).
"""

from __future__ import annotations

import math

from fastapi import HTTPException

from server.settings import Settings


def retry_later(status: int, detail: str, seconds: float) -> HTTPException:
    """The error to raise: ``status``, ``detail`` and ``Retry-After: ceil(seconds)``."""
    return HTTPException(status, detail, headers={"Retry-After": str(math.ceil(seconds))})


def unavailable(detail: str, settings: Settings) -> HTTPException:
    """503: no new session now (the server is full or shutting down)."""
    return retry_later(503, detail, settings.retry_after)
