"""Serves the RTVI messages a client sends: handshake, app requests, text input, hang-up,
and the results of client-side tool calls.

Apps answer their own ``client-message`` requests by registering a handler per ``t``
in a :class:`ClientMessages` (the app's is ``app.state.client_messages``)::

    @app.state.client_messages.on("weather")
    async def weather(session: RTVISession, d: Any) -> Any:
        return {"forecast": "sunny"}  # → server-response {t: "weather", d: ...}

A handler that raises answers ``error-response``; an unknown ``t`` does too.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from loguru import logger

from pipeline.client_tools import ClientToolError
from pipeline.ui_protocol import UI_CLIENT_TYPES
from server import __version__
from server.rtvi import protocol
from server.rtvi.protocol import (
    ClientMessageData,
    ClientReadyData,
    Envelope,
    FunctionCallResultData,
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

    def client_tool_result(self, data: FunctionCallResultData) -> None: ...

    def send_server_message(self, data: Any) -> None: ...

    async def summarize_context(self) -> dict[str, Any]: ...

    def handle_ui(self, type_: str, msg_id: str, data: Any) -> None: ...


ClientMessageHandler = Callable[[RTVISession, Any], Awaitable[Any]]
H = TypeVar("H", bound=ClientMessageHandler)


async def echo_handler(session: RTVISession, d: Any) -> Any:
    """``client-message`` ``t="echo"``: answers with the payload it was sent."""
    return d


async def session_info_handler(session: RTVISession, d: Any) -> Any:
    """``client-message`` ``t="session-info"``: the session as ``GET /api/sessions/{id}``."""
    return session.info()


async def summarize_context_handler(session: RTVISession, d: Any) -> Any:
    """``client-message`` ``t="summarize-context"``: summarize the older history now;
    answers ``{status, summarized_messages?, tokens_before, tokens_after?}``."""
    return await session.summarize_context()


DEFAULT_CLIENT_MESSAGE_HANDLERS: dict[str, ClientMessageHandler] = {
    "echo": echo_handler,
    "session-info": session_info_handler,
    "summarize-context": summarize_context_handler,
}


class ClientMessages(dict[str, ClientMessageHandler]):
    """The ``client-message`` handlers of an app, by ``t`` (shared by all its sessions:
    a handler registered while the server runs serves the next request)."""

    @classmethod
    def with_defaults(cls) -> ClientMessages:
        """The built-in ``echo`` and ``session-info`` handlers."""
        return cls(DEFAULT_CLIENT_MESSAGE_HANDLERS)

    def register(self, t: str, handler: ClientMessageHandler, *, replace: bool = False) -> None:
        """Answer ``client-message`` requests of type ``t`` with ``handler(session, d)``."""
        if not isinstance(t, str) or not t:
            raise ValueError("a client-message type must be a non-empty string")
        if not inspect.iscoroutinefunction(handler):
            raise TypeError(f"the handler for {t!r} must be an async def")
        if t in self and not replace:
            raise ValueError(f"client-message {t!r} already has a handler")
        self[t] = handler

    def on(self, t: str, *, replace: bool = False) -> Callable[[H], H]:
        """Decorator form of :meth:`register`; returns the handler unchanged."""

        def decorate(handler: H) -> H:
            self.register(t, handler, replace=replace)
            return handler

        return decorate

    def unregister(self, t: str) -> None:
        self.pop(t, None)


class RTVIHandler:
    """Dispatches validated client messages; anything invalid gets an error, never a crash."""

    def __init__(
        self,
        session: RTVISession,
        client_message_handlers: dict[str, ClientMessageHandler],
        max_text_chars: int = 4096,
    ) -> None:
        self._session = session
        self._handlers = client_message_handlers
        self._max_text_chars = max_text_chars
        self.ready = False
        # Told of every error reported to the client (the record keeps them, metrics count them).
        self.error_listeners: list[Callable[[RTVIError], None]] = []
        # Told of a fault of ours while serving a message (a bug, not the client's error).
        self.on_fault: Callable[[str, Exception], None] | None = None

    def handle(self, raw: Any) -> None:
        """Serve one decoded data-channel message."""
        try:
            envelope = protocol.parse_envelope(raw)
            data = protocol.parse_data(envelope)
            if isinstance(data, ClientReadyData):
                self._client_ready(envelope, data)
            elif isinstance(data, ClientMessageData):
                self._session.spawn(self._client_message(envelope.id, data), "client-message")
            elif isinstance(data, SendTextData):
                if not data.content.strip():
                    raise RTVIError("send-text content is empty", envelope.id)
                if len(data.content) > self._max_text_chars:
                    raise RTVIError(
                        f"send-text content too long: {len(data.content)} characters "
                        f"(limit {self._max_text_chars})",
                        envelope.id,
                    )
                self._session.send_text(data)
            elif isinstance(data, FunctionCallResultData):
                try:
                    self._session.client_tool_result(data)
                except ClientToolError as exc:
                    raise RTVIError(str(exc), envelope.id, "client tool result refused") from None
            elif envelope.type in UI_CLIENT_TYPES:
                self._session.handle_ui(envelope.type, envelope.id, data)
            elif envelope.type == "disconnect-bot":
                self._session.request_close("disconnect-bot")
        except RTVIError as exc:
            self.report(exc)
        except Exception as exc:
            # Raised into aiortc's data-channel callback it would end the association:
            # a bug serving one message must cost that message only.
            self._fault("serving a message", exc)
            msg_id = raw.get("id") if isinstance(raw, dict) else None
            self.report(RTVIError("internal error", msg_id if isinstance(msg_id, str) else None))

    def report(self, exc: RTVIError) -> None:
        """Tell the client what was wrong: ``error-response`` when there is an id to answer."""
        logger.debug("rtvi: {}", exc.error)
        for listener in self.error_listeners:
            try:
                listener(exc)
            except Exception as fault:  # a broken listener must not keep the client untold
                self._fault("an RTVI error listener", fault)
        if exc.msg_id is not None:
            self._session.send(protocol.error_response(exc.msg_id, exc.error))
        else:
            self._session.send(protocol.error(exc.error))

    def _fault(self, where: str, exc: Exception) -> None:
        if self.on_fault is not None:
            self.on_fault(where, exc)
        else:
            logger.opt(exception=exc).error("rtvi: {} failed", where)

    def _client_ready(self, envelope: Envelope, data: ClientReadyData) -> None:
        if protocol.version_major(data.version) not in protocol.SUPPORTED_MAJORS:
            # Still serve: an unknown version is reported, not refused.
            self.report(
                RTVIError(
                    f"unsupported RTVI version {data.version!r}; "
                    f"this server speaks {protocol.PROTOCOL_VERSION} (majors 1 and 2)",
                    envelope.id,
                    "unsupported RTVI version",
                )
            )
        self._session.set_client(data)
        self.ready = True
        about = {"library": "parley", "library_version": __version__}
        self._session.send(protocol.bot_ready(envelope.id, about))

    async def _client_message(self, msg_id: str, data: ClientMessageData) -> None:
        handler = self._handlers.get(data.t)
        if handler is None:
            error = f"no handler for client-message {data.t!r}"
            self.report(RTVIError(error, msg_id, "no handler for client-message"))
            return
        try:
            async with asyncio.timeout(CLIENT_MESSAGE_TIMEOUT):
                result = await handler(self._session, data.d)
        except TimeoutError:
            error = f"client-message {data.t!r} timed out"
            self.report(RTVIError(error, msg_id, "client-message timed out"))
        except Exception as exc:
            logger.exception("client-message handler {!r} failed", data.t)
            error = f"client-message {data.t!r} failed: {exc}"
            self.report(RTVIError(error, msg_id, "client-message failed"))
        else:
            self._session.send(protocol.server_response(msg_id, data.t, result))
