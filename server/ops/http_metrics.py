"""HTTP answers counted by status class, and 5xx answers as errors."""

from __future__ import annotations

from prometheus_client import Counter
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HTTPMetrics:
    """ASGI middleware: counts HTTP answers by status class in ``responses`` (``2xx``,
    ``4xx``, ...) and 5xx ones in ``errors{kind="http_5xx"}``."""

    def __init__(self, app: ASGIApp, responses: Counter, errors: Counter) -> None:
        self.app = app
        self.responses = responses
        self.errors = errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what the server answers when the app raised before starting one

        async def send_and_count(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_count)
        finally:
            self.responses.labels(f"{status // 100}xx").inc()
            if status >= 500:
                self.errors.labels("http_5xx").inc()
