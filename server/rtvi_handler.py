"""Serves the RTVI messages a client sends: handshake, app requests, text input, hang-up."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from loguru import logger

from pipeline.ui_protocol import UI_CLIENT_TYPES
from server import __version__, rtvi
from server.rtvi import (
    ClientMessageData,
    ClientReadyData,
    Envelope,
    RTVIError,
    SendTextData,
)

# How long an app's client-message handler may take (the official client waits 10 s).
CLIENT_MESSAGE_TIMEOUT = 9.0


class RTVISession(Protocol):
    """What the handler needs from the session it serves."""

    def send(self, msg: dict[str, Any]) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]: ...

    def set_client(self, ready: ClientReadyData) -> None: ...

    def send_text(self, data: SendTextData) -> None: ...

    def request_close(self, reason: str) -> None: ...

    def info(self) -> dict[str, Any]: ...

    def handle_ui(self, type_: str, msg_id: str, data: Any) -> None: ...


ClientMessageHandler = Callable[[RTVISession, Any], Awaitable[Any]]


async def echo_handler(session: RTVISession, d: Any) -> Any:
    """``client-message`` ``t="echo"``: answers with the payload it was sent."""
    return d


async def session_info_handler(session: RTVISession, d: Any) -> Any:
    """``client-message`` ``t="session-info"``: the session as ``GET /api/sessions/{id}``."""
    return session.info()


DEFAULT_CLIENT_MESSAGE_HANDLERS: dict[str, ClientMessageHandler] = {
    "echo": echo_handler,
    "session-info": session_info_handler,
}


class RTVIHandler:
    """Dispatches validated client messages; anything invalid gets an error, never a crash."""

    def __init__(
        self,
        session: RTVISession,
        client_message_handlers: dict[str, ClientMessageHandler],
    ) -> None:
        self._session = session
        self._handlers = client_message_handlers
        self.ready = False

    def handle(self, raw: Any) -> None:
        """Serve one decoded data-channel message."""
        try:
            envelope = rtvi.parse_envelope(raw)
            data = rtvi.parse_data(envelope)
            if isinstance(data, ClientReadyData):
                self._client_ready(envelope, data)
            elif isinstance(data, ClientMessageData):
                self._session.spawn(self._client_message(envelope.id, data), "client-message")
            elif isinstance(data, SendTextData):
                if not data.content.strip():
                    raise RTVIError("send-text content is empty", envelope.id)
                self._session.send_text(data)
            elif envelope.type in UI_CLIENT_TYPES:
                self._session.handle_ui(envelope.type, envelope.id, data)
            elif envelope.type == "disconnect-bot":
                self._session.request_close("disconnect-bot")
        except RTVIError as exc:
            self.report(exc)

    def report(self, exc: RTVIError) -> None:
        """Tell the client what was wrong: ``error-response`` when there is an id to answer."""
        logger.debug("rtvi: {}", exc.error)
        if exc.msg_id is not None:
            self._session.send(rtvi.error_response(exc.msg_id, exc.error))
        else:
            self._session.send(rtvi.error(exc.error))

    def _client_ready(self, envelope: Envelope, data: ClientReadyData) -> None:
        if rtvi.version_major(data.version) not in rtvi.SUPPORTED_MAJORS:
            # Still serve: an unknown version is reported, not refused.
            self.report(
                RTVIError(
                    f"unsupported RTVI version {data.version!r}; "
                    f"this server speaks {rtvi.PROTOCOL_VERSION} (majors 1 and 2)",
                    envelope.id,
                )
            )
        self._session.set_client(data)
        self.ready = True
        about = {"library": "parley", "library_version": __version__}
        self._session.send(rtvi.bot_ready(envelope.id, about))

    async def _client_message(self, msg_id: str, data: ClientMessageData) -> None:
        handler = self._handlers.get(data.t)
        if handler is None:
            self.report(RTVIError(f"no handler for client-message {data.t!r}", msg_id))
            return
        try:
            async with asyncio.timeout(CLIENT_MESSAGE_TIMEOUT):
                result = await handler(self._session, data.d)
        except TimeoutError:
            self.report(RTVIError(f"client-message {data.t!r} timed out", msg_id))
        except Exception as exc:
            logger.exception("client-message handler {!r} failed", data.t)
            self.report(RTVIError(f"client-message {data.t!r} failed: {exc}", msg_id))
        else:
            self._session.send(rtvi.server_response(msg_id, data.t, result))
