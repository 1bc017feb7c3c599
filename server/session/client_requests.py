"""What the client's RTVI requests do to one call: ``client-ready`` (who the client is),
``send-text`` (typed input), ``llm-function-call-result`` (a client-side tool's answer),
``dtmf`` (keypad presses, as a phone's) and the UI worker's messages.
:class:`server.rtvi.handler.RTVIHandler` validates them and calls these; app
``client-message`` handlers still get the session itself."""

from __future__ import annotations

from typing import Any, Protocol

from pipeline.turns.keypad import DIGITS
from server.rtvi.protocol import ClientReadyData, FunctionCallResultData, SendTextData
from server.rtvi.ui_worker import UIWorker
from server.session.voice import VoiceSession
from server.storage.recorder import SessionRecorder
from server.storage.store import ClientInfo


class RequestTarget(Protocol):
    """The parts of a session the client's requests reach (read when a request comes:
    the session builds its voice pipeline after its RTVI handler)."""

    client: ClientInfo
    record: SessionRecorder | None
    voice: VoiceSession
    ui: UIWorker

    def greet(self) -> None: ...


class SessionRequests:
    """Serves the client's requests on the session's voice pipeline and UI worker."""

    def __init__(self, session: RequestTarget) -> None:
        self._session = session

    def set_client(self, ready: ClientReadyData) -> None:
        client = self._session.client
        client.rtvi_version = ready.version
        if ready.about is not None:
            client.library = ready.about.library
            client.library_version = ready.about.library_version
            client.platform = ready.about.platform
        if self._session.record is not None:
            self._session.record.client_updated(client)
        self._session.greet()

    def send_text(self, data: SendTextData) -> None:
        options = data.options
        self._session.voice.send_text(
            data.content,
            run_immediately=options.run_immediately if options else True,
            audio_response=options.audio_response if options else True,
        )

    def client_tool_result(self, data: FunctionCallResultData) -> None:
        """Raises ``ClientToolError`` if no such call waits for the client."""
        self._session.voice.client_tool_result(data.tool_call_id, data.function_name, data.result)

    def press_keys(self, keys: list[str]) -> None:
        """RTVI ``dtmf``: the keys go the way a phone's do (the call's keypad). All are
        checked first, so a bad one (``ValueError``) presses none."""
        for key in keys:
            if key not in DIGITS:
                raise ValueError(f"not a DTMF key: {key[:8]!r}")
        for key in keys:
            self._session.voice.keypad.press(key)

    def handle_ui(self, type_: str, msg_id: str, data: Any) -> None:
        """A UI worker protocol message (``ui-snapshot``, ``ui-event``,
        ``ui-cancel-job-group``)."""
        self._session.ui.handle(type_, msg_id, data)
