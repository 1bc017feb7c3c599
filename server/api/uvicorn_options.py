"""What ``uvicorn.Config`` is given besides the app: the bounded HTTP and WebSocket
protocols (:mod:`server.api.slow_clients`, :mod:`server.api.socket_protocol`), sharing one
count of connections per address, and whose forwarded addresses are believed."""

from __future__ import annotations

import os
from typing import Any

from loguru import logger

from server.api.slow_clients import ConnectionBook, http_protocol
from server.api.socket_protocol import websocket_protocol
from server.settings import Settings


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The options: ``X-Forwarded-For``/``-Proto`` are believed only from
    ``PARLEY_TRUSTED_PROXIES`` (by default from nobody: uvicorn's own default trusts
    127.0.0.1, so anything on the host could pose as any client to the per-address limits
    and the records)."""
    if os.environ.get("FORWARDED_ALLOW_IPS") and not settings.trusted_proxies:
        logger.warning(
            "FORWARDED_ALLOW_IPS is ignored: set PARLEY_TRUSTED_PROXIES to the proxies whose "
            "X-Forwarded-For is believed (none is now)"
        )
    book = ConnectionBook(settings)
    return {
        "http": http_protocol(settings, book),
        "ws": websocket_protocol(settings, book),
        "proxy_headers": bool(settings.trusted_proxies),
        "forwarded_allow_ips": settings.trusted_proxies or None,
        # WebSocket calls: a larger message is refused by the protocol layer, unread.
        "ws_max_size": settings.ws_max_message_bytes,
    }
