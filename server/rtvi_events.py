"""Pipeline events → RTVI server messages, sent as they happen.

One observer per session, subscribed to the conversation's events. Bot speaking and the
spoken text follow real playout (the outbound track reports them), not generation.
Function-call reports honour a report level, since arguments and results can be private:
``none`` (the events, with ids only), ``name`` (plus function names: the default) or
``full`` (plus arguments and results).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pipeline.aggregators.text import now_iso
from pipeline.frames import (
    BotStartedSpeaking,
    BotStoppedSpeaking,
    BotText,
    BotTextStarted,
    Emitter,
    FunctionCallCancelled,
    FunctionCallInProgress,
    FunctionCallResult,
    Interruption,
    LLMResponseEnded,
    LLMResponseStarted,
    LLMText,
    Metric,
    ServiceError,
    Transcription,
    TTSStarted,
    TTSStopped,
    UserMuteStarted,
    UserMuteStopped,
    UserTranscript,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.metrics import rtvi_metrics
from server import rtvi

ReportLevel = Literal["none", "name", "full"]


class RTVIEvents:
    """Sends the RTVI message for each pipeline event the client should see."""

    def __init__(
        self,
        send: Callable[[dict[str, Any]], None],
        report_level: ReportLevel = "name",
        user_id: str = "",
    ) -> None:
        self._send = send
        self.report_level = report_level
        self.user_id = user_id
        self._function_names: dict[str, str] = {}

    def subscribe(self, events: Emitter) -> None:
        simple: dict[type, str] = {
            UserTurnStarted: "user-started-speaking",
            UserTurnStopped: "user-stopped-speaking",
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
            events.on(kind, lambda _event, t=type_: self._send(rtvi.message(t)))
        events.on(Transcription, self._transcription)
        events.on(UserTranscript, self._user_text)
        events.on(LLMText, lambda e: self._send(rtvi.message("bot-llm-text", {"text": e.text})))
        events.on(BotTextStarted, self._tts_text)
        events.on(BotText, self._bot_output)
        events.on(FunctionCallInProgress, self._call_started)
        events.on(FunctionCallResult, self._call_result)
        events.on(FunctionCallCancelled, self._call_cancelled)
        events.on(Metric, lambda e: self._send(rtvi.message("metrics", rtvi_metrics(e))))
        events.on(ServiceError, self._error)

    def _transcription(self, event: Transcription) -> None:
        data = {
            "text": event.text,
            "user_id": event.user_id or self.user_id,
            "timestamp": now_iso(),
            "final": event.final,
        }
        self._send(rtvi.message("user-transcription", data))

    def _user_text(self, event: UserTranscript) -> None:
        if event.content:
            self._send(rtvi.message("user-llm-text", {"text": event.content}))

    def _tts_text(self, event: BotTextStarted) -> None:
        self._send(rtvi.message("bot-tts-text", {"text": event.text}))

    def _bot_output(self, event: BotText) -> None:
        aggregated_by = "sentence" if event.spoken else "word"
        data = {"text": event.text, "spoken": event.spoken, "aggregated_by": aggregated_by}
        self._send(rtvi.message("bot-output", data))

    # -- function calls ------------------------------------------------------------------

    def _call_started(self, event: FunctionCallInProgress) -> None:
        call = event.call
        self._function_names[call.tool_call_id] = call.function_name
        named = self.report_level != "none"
        started: dict[str, Any] = {"function_name": call.function_name} if named else {}
        progress: dict[str, Any] = {"tool_call_id": call.tool_call_id, **started}
        if self.report_level == "full":
            progress["arguments"] = call.arguments
        self._send(rtvi.message("llm-function-call-started", started))
        self._send(rtvi.message("llm-function-call-in-progress", progress))

    def _call_result(self, event: FunctionCallResult) -> None:
        if not event.is_final or event.tool_call_id not in self._function_names:
            return
        self._stopped(event.tool_call_id, cancelled=False, result=event.result)

    def _call_cancelled(self, event: FunctionCallCancelled) -> None:
        if event.tool_call_id in self._function_names:
            self._stopped(event.tool_call_id, cancelled=True, result=None)

    def _stopped(self, tool_call_id: str, cancelled: bool, result: Any) -> None:
        name = self._function_names.pop(tool_call_id)
        data: dict[str, Any] = {"tool_call_id": tool_call_id, "cancelled": cancelled}
        if self.report_level != "none":
            data["function_name"] = name
        if self.report_level == "full" and not cancelled:
            data["result"] = result
        self._send(rtvi.message("llm-function-call-stopped", data))

    def _error(self, event: ServiceError) -> None:
        self._send(rtvi.error(f"{event.service}: {event.error}", fatal=event.fatal))
