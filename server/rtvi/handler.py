"""Serves the RTVI messages a client sends: handshake, app requests, text input, hang-up,
the results of client-side tool calls, and keypad presses (``dtmf``, RTVI 2.x).

``client-ready`` settles the protocol the client is served from then on
(:class:`server.rtvi.versions.ClientProtocol`, shared with the session's events).

Apps answer their own ``client-message`` requests by registering a handler per ``t``
in a :class:`ClientMessages` (the app's is ``app.state.client_messages``)::

    @app.state.client_messages.on("weather")
    async def weather(session: RTVISession, d: Any) -> Any:
        return {"forecast": "sunny"}  # → server-response {t: "weather", d: ...}

A handler that raises answers ``error-response``; an unknown ``t`` does too.

Every request is answered: a reply too large for the data channel (over
``max_reply_bytes``, the size every peer accepts unless it says otherwise, RFC 8841) or
that cannot be serialized is an ``error-response`` saying so, not a message that aiortc
refuses and the client never sees. A typed text past the session's typed-turn budget is
refused the same way.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar, cast

from loguru import logger

from pipeline.tools.agent import Agent, call_user_function
from pipeline.tools.client import ClientToolError
from pipeline.turns.merge import TypedTextRefused
from pipeline.ui.protocol import UI_CLIENT_TYPES
from server import __version__
from server.rtvi import protocol
from server.rtvi.protocol import (
    ClientMessageData,
    ClientReadyData,
    DTMFData,
    Envelope,
    FunctionCallResultData,
    RTVIError,
    SendTextData,
)
from server.rtvi.versions import ClientProtocol

# How long an app's client-message handler may take (the official client waits 10 s).
CLIENT_MESSAGE_TIMEOUT = 9.0
# The largest reply sent: the maximum message size a peer that advertises none accepts
# (RFC 8841, section 6); aiortc refuses larger sends to such a peer.
MAX_REPLY_BYTES = 65536


class RTVISession(Protocol):
    """What the handler and the app's ``client-message`` handlers need from the session."""

    def send(self, msg: dict[str, Any]) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]: ...

    def request_close(self, reason: str) -> None: ...

    def info(self) -> dict[str, Any]: ...

    def send_server_message(self, data: Any) -> None: ...

    async def summarize_context(self) -> dict[str, Any]: ...


class ClientRequests(Protocol):
    """What the client's requests do to the call, once validated."""

    def set_client(self, ready: ClientReadyData) -> None: ...

    def send_text(self, data: SendTextData) -> None: ...

    def client_tool_result(self, data: FunctionCallResultData) -> None: ...

    def handle_ui(self, type_: str, msg_id: str, data: Any) -> None: ...

    def press_keys(self, keys: list[str]) -> None:
        """Keypad presses, in order; ``ValueError`` (none pressed) if one is no key."""
        ...


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


def add_agent_handlers(handlers: ClientMessages, agent: Agent) -> None:
    """Serve the agent's ``on_client_message`` hooks, given the call's context; the
    agent's win over the built-in handlers of the same type."""
    for t, hook in agent.client_message_handlers.items():

        async def serve(session: RTVISession, d: Any, hook: Any = hook) -> Any:
            return await call_user_function(hook, getattr(session, "call_context", None), d)

        handlers.register(t, serve, replace=True)


class RTVIHandler:
    """Dispatches validated client messages; anything invalid gets an error, never a crash."""

    def __init__(
        self,
        session: RTVISession,
        client_message_handlers: dict[str, ClientMessageHandler],
        max_text_chars: int = 4096,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        requests: ClientRequests | None = None,
        client_protocol: ClientProtocol | None = None,
    ) -> None:
        self._session = session
        # The protocol the client is served, as its client-ready settles it.
        self.client_protocol = client_protocol or ClientProtocol()
        # Without ``requests``, the session serves them itself (a stand-in in the tests).
        self._requests = requests if requests is not None else cast(ClientRequests, session)
        self._handlers = client_message_handlers
        self._max_text_chars = max_text_chars
        self._max_reply_bytes = max_reply_bytes
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
                self._send_text(envelope.id, data)
            elif isinstance(data, FunctionCallResultData):
                try:
                    self._requests.client_tool_result(data)
                except ClientToolError as exc:
                    raise RTVIError(str(exc), envelope.id, "client tool result refused") from None
            elif isinstance(data, DTMFData):
                self._dtmf(envelope.id, data)
            elif envelope.type in UI_CLIENT_TYPES:
                self._requests.handle_ui(envelope.type, envelope.id, data)
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

    def _send_text(self, msg_id: str, data: SendTextData) -> None:
        if not data.content.strip():
            raise RTVIError("send-text content is empty", msg_id)
        if len(data.content) > self._max_text_chars:
            raise RTVIError(
                f"send-text content too long: {len(data.content)} characters "
                f"(limit {self._max_text_chars})",
                msg_id,
            )
        try:
            self._requests.send_text(data)
        except TypedTextRefused as exc:
            raise RTVIError(str(exc), msg_id, "too many typed turns") from None

    def _dtmf(self, msg_id: str, data: DTMFData) -> None:
        served = self.client_protocol
        if not served.takes_dtmf:
            error = f"dtmf is an RTVI 2 message; this client is served {served.version}"
            raise RTVIError(error, msg_id, "dtmf before RTVI 2")
        try:
            self._requests.press_keys(data.keys)
        except ValueError as exc:
            raise RTVIError(f"invalid dtmf: {exc}", msg_id, "invalid dtmf") from None

    def _client_ready(self, envelope: Envelope, data: ClientReadyData) -> None:
        error = protocol.version_error(data.version)
        if error is not None:
            # Still serve (as 1.x): an odd or unknown version is reported, not refused.
            reason = error.split(" ", 2)[0] + " RTVI version"  # invalid / unsupported
            self.report(RTVIError(error, envelope.id, reason))
        version = self.client_protocol.negotiate(data.version)
        self._requests.set_client(data)
        self.ready = True
        about = {"library": "parley", "library_version": __version__}
        self._session.send(protocol.bot_ready(envelope.id, about, version))

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
            # The app's fault, counted and logged now and then (a client can repeat it).
            self._fault(f"client-message handler {data.t!r}", exc)
            error = f"client-message {data.t!r} failed: {exc}"
            self.report(RTVIError(error, msg_id, "client-message failed"))
        else:
            self._reply(msg_id, data.t, result)

    def _reply(self, msg_id: str, t: str, result: Any) -> None:
        """Send a handler's result, or an ``error-response`` saying why it cannot go."""
        try:
            reply = protocol.server_response(msg_id, t, result)
            # Measured as the channel sends it (ASCII JSON: characters are bytes).
            size = len(json.dumps(reply, separators=(",", ":")))
        except (ValueError, TypeError, RecursionError) as exc:
            error = f"client-message {t!r}: the reply is not JSON: {exc}"
            self.report(RTVIError(error[:300], msg_id, "reply not JSON"))
            return
        if size > self._max_reply_bytes:
            error = (
                f"client-message {t!r}: the reply is too large: {size} bytes "
                f"(limit {self._max_reply_bytes})"
            )
            self.report(RTVIError(error, msg_id, "reply too large"))
            return
        self._session.send(reply)
