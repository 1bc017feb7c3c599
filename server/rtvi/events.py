"""Pipeline events → RTVI server messages, sent as they happen.

One observer per session, subscribed to the conversation's events. Bot speaking and the
spoken text follow real playout (the outbound track reports them), not generation. The
mapping below is the one for every client; what depends on the RTVI version the client
announced (``bot-output``'s shape, the 2.x-only ``vad-user-*``) is decided in
:mod:`server.rtvi.versions`.

Function-call reports honour a report level per tool, since arguments and results can be
private: ``none`` (the events, with ids only), ``name`` (plus function names: the
default) or ``full`` (plus arguments and results). A client-side tool's
``llm-function-call-in-progress`` always carries its name and arguments whatever the
level: the client runs it and needs both (it sends them back with its result).

The LLM's reasoning (thought) has no message type in RTVI (1.x or 2.x), so it goes out as
``server-message`` (the protocol's channel for what it does not define, which the
official client hands to ``onServerMessage``), in the shape of the ``bot-llm-*`` trio:
``{"type": "bot-llm-thought-started"}``, ``{"type": "bot-llm-thought-text", "text"}``
per chunk, ``{"type": "bot-llm-thought-stopped"}``. Never as ``bot-llm-text`` or
``bot-output``: a client must not show or speak it as the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pipeline.events import (
    AppMessage,
    BotStartedSpeaking,
    BotStoppedSpeaking,
    BotText,
    BotTextProgress,
    BotTextStarted,
    Emitter,
    Event,
    FunctionCall,
    FunctionCallCancelled,
    FunctionCallInProgress,
    FunctionCallResult,
    Interruption,
    LLMResponseEnded,
    LLMResponseStarted,
    LLMText,
    LLMThoughtEnded,
    LLMThoughtStarted,
    LLMThoughtText,
    Metric,
    ServiceError,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    TTSStarted,
    TTSStopped,
    UserMuteStarted,
    UserMuteStopped,
    UserTranscript,
    UserTurnDiscarded,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.events.event import now_iso
from pipeline.session_metrics import rtvi_metrics
from pipeline.tools.registry import ReportLevel, ToolRegistry
from server.rtvi import protocol
from server.rtvi.server_messages import (
    FunctionCallInProgressData,
    FunctionCallStartedData,
    FunctionCallStoppedData,
    LegacyFunctionCallData,
    TextData,
    UserTranscriptionData,
)
from server.rtvi.versions import BotOutput, ClientProtocol

RTVI_METRIC_KINDS = frozenset({"ttfb", "processing", "characters", "tokens"})
# The VAD's own start and stop (RTVI 2's vad-user-*), told by hearing (:meth:`RTVIEvents.vad`)
# before turn-taking sees them: a mute or a turn strategy does not hold them back.
VAD_MESSAGES: dict[type[Event], str] = {
    SpeechStarted: "vad-user-started-speaking",
    SpeechStopped: "vad-user-stopped-speaking",
}


class FunctionCallReporting:
    """What the client is told about each tool's calls.

    The level of a tool is, first found: ``overrides[name]`` (the
    ``function_call_report_levels`` setting), the tool's own ``report_level``, the
    session ``default``. ``legacy`` announces client-side calls with the deprecated
    ``llm-function-call`` instead of ``llm-function-call-in-progress`` (for clients that
    predate it; the official client reacts to both, so it would run a tool twice).
    """

    def __init__(
        self,
        default: ReportLevel = "name",
        overrides: Mapping[str, ReportLevel] | None = None,
        tools: ToolRegistry | None = None,
        legacy: bool = False,
    ) -> None:
        self.default = default
        self.overrides = dict(overrides or {})
        self.tools = tools
        self.legacy = legacy

    def level(self, function_name: str) -> ReportLevel:
        if function_name in self.overrides:
            return self.overrides[function_name]
        spec = self.tools.get(function_name) if self.tools is not None else None
        if spec is not None and spec.report_level is not None:
            return spec.report_level
        return self.default

    def client_side(self, function_name: str) -> bool:
        spec = self.tools.get(function_name) if self.tools is not None else None
        return spec is not None and spec.client_side


class RTVIEvents:
    """Sends the RTVI message for each pipeline event the client should see."""

    def __init__(
        self,
        send: Callable[[dict[str, Any]], None],
        report_level: ReportLevel | FunctionCallReporting = "name",
        user_id: str = "",
        thoughts: bool = True,
        client_protocol: ClientProtocol | None = None,
    ) -> None:
        self._send = send
        # The protocol the client is served (1.x until its client-ready says otherwise).
        self.client_protocol = client_protocol or ClientProtocol()
        self.output = BotOutput(self.client_protocol, send)
        self.thoughts = thoughts  # send the LLM's reasoning (see the module docstring)
        self.reporting = (
            report_level
            if isinstance(report_level, FunctionCallReporting)
            else FunctionCallReporting(report_level)
        )
        self.user_id = user_id
        self._function_names: dict[str, str] = {}

    def subscribe(self, events: Emitter) -> None:
        # Before bot-llm-stopped and bot-interrupted: the rest of a text answer (2.x).
        for end in (LLMResponseEnded, Interruption):
            events.on(end, lambda _: self.output.text_ended())
        simple: dict[type[Event], str] = {
            UserTurnStarted: "user-started-speaking",
            UserTurnStopped: "user-stopped-speaking",
            UserTurnDiscarded: "user-stopped-speaking",  # a backchannel: the bot goes on
            BotStartedSpeaking: "bot-started-speaking",
            BotStoppedSpeaking: "bot-stopped-speaking",
            LLMResponseStarted: "bot-llm-started",
            LLMResponseEnded: "bot-llm-stopped",
            TTSStarted: "bot-tts-started",
            TTSStopped: "bot-tts-stopped",
            UserMuteStarted: "user-mute-started",
            UserMuteStopped: "user-mute-stopped",
            Interruption: "bot-interrupted",
        }
        for kind, type_ in simple.items():
            events.on(kind, self._sender(type_))
        events.on(Transcription, self._transcription)
        events.on(UserTranscript, self._user_text)
        events.on(
            LLMText, lambda e: self._send(protocol.message("bot-llm-text", TextData(text=e.text)))
        )
        events.on(BotTextStarted, self._tts_text)
        events.on(BotTextProgress, lambda e: self.output.progress(e.text, e.spoken))
        events.on(BotText, self._bot_output)
        events.on(FunctionCallInProgress, self._call_started)
        events.on(FunctionCallResult, self._call_result)
        events.on(FunctionCallCancelled, self._call_cancelled)
        events.on(Metric, self._metric)
        if self.thoughts:
            events.on(LLMThoughtStarted, lambda _: self._thought("bot-llm-thought-started"))
            events.on(LLMThoughtText, lambda e: self._thought("bot-llm-thought-text", e.text))
            events.on(LLMThoughtEnded, lambda _: self._thought("bot-llm-thought-stopped"))
        events.on(ServiceError, self._error)
        events.on(AppMessage, lambda e: self._send(protocol.message("server-message", e.data)))

    def vad(self, event: Event) -> None:
        """One of the VAD's events, as hearing has it (only some become messages)."""
        type_ = VAD_MESSAGES.get(type(event))
        if type_ is not None and self.client_protocol.sends(type_):
            self._send(protocol.message(type_))

    def _sender(self, type_: str) -> Callable[[Event], None]:
        """A handler that sends the data-less RTVI message ``type_`` (if the client's
        protocol has it)."""

        def send(_event: Event) -> None:
            if self.client_protocol.sends(type_):
                self._send(protocol.message(type_))

        return send

    def _metric(self, event: Metric) -> None:
        # RTVI's metrics are these kinds; the rest (reasoning) is for Prometheus only.
        if event.kind in RTVI_METRIC_KINDS:
            self._send(protocol.message("metrics", rtvi_metrics(event)))

    def _thought(self, kind: str, text: str | None = None) -> None:
        data: dict[str, Any] = {"type": kind}
        if text is not None:
            data["text"] = text
        self._send(protocol.message("server-message", data))

    def _transcription(self, event: Transcription) -> None:
        if not event.text.strip():
            return  # an utterance with no words (a cough): nothing to show
        data = UserTranscriptionData(
            text=event.text,
            user_id=event.user_id or self.user_id,
            timestamp=now_iso(),
            final=event.final,
        )
        self._send(protocol.message("user-transcription", data))

    def _user_text(self, event: UserTranscript) -> None:
        if event.content:
            self._send(protocol.message("user-llm-text", TextData(text=event.content)))

    def _tts_text(self, event: BotTextStarted) -> None:
        self._send(protocol.message("bot-tts-text", TextData(text=event.text)))
        self.output.started(event.text)

    def _bot_output(self, event: BotText) -> None:
        if event.spoken:
            self.output.played(event.text)
        else:
            self.output.sent(event.text)

    # -- function calls ------------------------------------------------------------------

    def _call_started(self, event: FunctionCallInProgress) -> None:
        call = event.call
        self._function_names[call.tool_call_id] = call.function_name
        level = self.reporting.level(call.function_name)
        named = level != "none"
        started = FunctionCallStartedData()
        if named:
            started.function_name = call.function_name
        self._send(protocol.message("llm-function-call-started", started))
        if self.reporting.client_side(call.function_name):
            self._announce_client_call(call)
            return
        progress = FunctionCallInProgressData(tool_call_id=call.tool_call_id)
        if named:
            progress.function_name = call.function_name
        if level == "full":
            progress.arguments = call.arguments
        self._send(protocol.message("llm-function-call-in-progress", progress))

    def _announce_client_call(self, call: FunctionCall) -> None:
        if self.reporting.legacy:
            legacy = LegacyFunctionCallData(
                function_name=call.function_name,
                tool_call_id=call.tool_call_id,
                args=call.arguments,
            )
            self._send(protocol.message("llm-function-call", legacy))
            return
        progress = FunctionCallInProgressData(
            tool_call_id=call.tool_call_id,
            function_name=call.function_name,
            arguments=call.arguments,
        )
        self._send(protocol.message("llm-function-call-in-progress", progress))

    def _call_result(self, event: FunctionCallResult) -> None:
        if not event.is_final or event.tool_call_id not in self._function_names:
            return
        self._stopped(event.tool_call_id, cancelled=False, result=event.result)

    def _call_cancelled(self, event: FunctionCallCancelled) -> None:
        if event.tool_call_id in self._function_names:
            self._stopped(event.tool_call_id, cancelled=True, result=None)

    def _stopped(self, tool_call_id: str, cancelled: bool, result: Any) -> None:
        name = self._function_names.pop(tool_call_id)
        level = self.reporting.level(name)
        data = FunctionCallStoppedData(tool_call_id=tool_call_id, cancelled=cancelled)
        if level != "none":
            data.function_name = name
        if level == "full" and not cancelled:
            data.result = result
        self._send(protocol.message("llm-function-call-stopped", data))

    def _error(self, event: ServiceError) -> None:
        self._send(protocol.error(f"{event.service}: {event.error}", fatal=event.fatal))
