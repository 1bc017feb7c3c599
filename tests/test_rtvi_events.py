"""Pipeline events become the RTVI messages the client shows, in order, with the right data."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.events import (
    AppMessage,
    BotStartedSpeaking,
    BotStoppedSpeaking,
    BotText,
    BotTextStarted,
    Emitter,
    FunctionCall,
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
from pipeline.tools.registry import ToolRegistry, ToolSpec
from server.rtvi import server_messages
from server.rtvi.events import FunctionCallReporting, RTVIEvents


def observe(level: str = "name") -> tuple[Emitter, list[dict[str, Any]]]:
    events, sent = Emitter(), []
    RTVIEvents(sent.append, report_level=level, user_id="u1").subscribe(events)
    return events, sent


def test_a_voice_turn_in_order() -> None:
    events, sent = observe()
    for event in (
        UserTurnStarted(1.0, "vad"),
        Transcription("what is two plus two", 1.5),
        UserTurnStopped(2.0, "speech_timeout"),
        UserTranscript("what is two plus two", "T"),
        LLMResponseStarted(),
        LLMText("Four."),
        TTSStarted(),
        LLMResponseEnded(),
        TTSStopped(),
        BotStartedSpeaking(2.5),
        BotTextStarted("Four."),
        BotText("Four."),
        BotStoppedSpeaking(3.0),
        Metric("llm", "ttfb", 0.2, "smol"),
    ):
        events.emit(event)
    assert [m["type"] for m in sent] == [
        "user-started-speaking",
        "user-transcription",
        "user-stopped-speaking",
        "user-llm-text",
        "bot-llm-started",
        "bot-llm-text",
        "bot-tts-started",
        "bot-llm-stopped",
        "bot-tts-stopped",
        "bot-started-speaking",
        "bot-tts-text",
        "bot-output",
        "bot-transcription",
        "bot-stopped-speaking",
        "metrics",
    ]
    assert all(m["label"] == "rtvi-ai" for m in sent)
    transcription = sent[1]["data"]
    assert transcription["text"] == "what is two plus two"
    assert transcription["final"] is True and transcription["user_id"] == "u1"
    assert transcription["timestamp"].endswith("+00:00")
    assert sent[11]["data"] == {"text": "Four.", "spoken": True, "aggregated_by": "sentence"}
    assert sent[12]["data"] == {"text": "Four."}
    assert sent[14]["data"] == {"ttfb": [{"processor": "llm", "model": "smol", "value": 0.2}]}


def test_text_only_output_is_not_marked_spoken() -> None:
    events, sent = observe()
    events.emit(BotText("Hi", spoken=False, includes_spaces=True))
    assert sent == [
        {
            "label": "rtvi-ai",
            "type": "bot-output",
            "data": {"text": "Hi", "spoken": False, "aggregated_by": "word"},
        }
    ], "text that was not spoken has no bot-transcription"


def test_barge_in_and_errors() -> None:
    events, sent = observe()
    events.emit(Interruption(1.0))
    events.emit(ServiceError("llm", "endpoint down"))
    assert sent[0]["type"] == "bot-interrupted"
    assert sent[1] == {
        "label": "rtvi-ai",
        "type": "error",
        "data": {"error": "llm: endpoint down", "fatal": False},
    }


@pytest.mark.parametrize(
    ("level", "started", "progress", "stopped"),
    [
        ("none", {}, {"tool_call_id": "c1"}, {"tool_call_id": "c1", "cancelled": False}),
        ("name", {"function_name": "get_time"},
         {"tool_call_id": "c1", "function_name": "get_time"},
         {"tool_call_id": "c1", "cancelled": False, "function_name": "get_time"}),
        ("full", {"function_name": "get_time"},
         {"tool_call_id": "c1", "function_name": "get_time", "arguments": {"tz": "UTC"}},
         {"tool_call_id": "c1", "cancelled": False, "function_name": "get_time",
          "result": {"time": "12:00"}}),
    ],
)  # fmt: skip
def test_function_call_report_levels(
    level: str, started: dict, progress: dict, stopped: dict
) -> None:
    events, sent = observe(level)
    events.emit(FunctionCallInProgress(FunctionCall("c1", "get_time", {"tz": "UTC"})))
    events.emit(FunctionCallResult("c1", "get_time", {"p": 1}, is_final=False))
    events.emit(FunctionCallResult("c1", "get_time", {"time": "12:00"}))
    assert [(m["type"], m["data"]) for m in sent] == [
        ("llm-function-call-started", started),
        ("llm-function-call-in-progress", progress),
        ("llm-function-call-stopped", stopped),
    ]


def test_cancelled_call_is_reported_stopped_once() -> None:
    events, sent = observe()
    events.emit(FunctionCallInProgress(FunctionCall("c2", "research", {})))
    events.emit(FunctionCallCancelled("c2", "research"))
    events.emit(FunctionCallResult("c2", "research", "late"))
    assert sent[-1]["data"] == {
        "tool_call_id": "c2",
        "cancelled": True,
        "function_name": "research",
    }
    assert len(sent) == 3


def tools() -> ToolRegistry:
    registry = ToolRegistry()
    schema = {"type": "object", "properties": {}}
    registry.register(ToolSpec("secret_lookup", "", schema, client_side=True, report_level="none"))
    registry.register(ToolSpec("where", "", schema, client_side=True))
    return registry


def test_report_level_precedence_setting_then_tool_then_default() -> None:
    reporting = FunctionCallReporting("name", {"where": "full"}, tools())
    assert reporting.level("where") == "full", "the setting beats the default"
    assert reporting.level("secret_lookup") == "none", "the tool's own level"
    assert reporting.level("anything_else") == "name"
    assert (
        FunctionCallReporting("full", {"secret_lookup": "name"}, tools()).level("secret_lookup")
        == "name"
    )


def test_client_side_calls_always_carry_name_and_arguments() -> None:
    events, sent = Emitter(), []
    RTVIEvents(sent.append, FunctionCallReporting("name", {}, tools())).subscribe(events)
    events.emit(FunctionCallInProgress(FunctionCall("c1", "secret_lookup", {"q": "x"})))
    events.emit(FunctionCallResult("c1", "secret_lookup", {"answer": 42}))
    for msg in sent:
        server_messages.validate(msg)
    assert [(m["type"], m["data"]) for m in sent] == [
        ("llm-function-call-started", {}),
        ("llm-function-call-in-progress",
         {"tool_call_id": "c1", "function_name": "secret_lookup", "arguments": {"q": "x"}}),
        ("llm-function-call-stopped", {"tool_call_id": "c1", "cancelled": False}),
    ]  # fmt: skip


def test_legacy_clients_get_llm_function_call_instead() -> None:
    events, sent = Emitter(), []
    reporting = FunctionCallReporting("name", {}, tools(), legacy=True)
    RTVIEvents(sent.append, reporting).subscribe(events)
    events.emit(FunctionCallInProgress(FunctionCall("c1", "where", {"p": 1})))
    events.emit(FunctionCallInProgress(FunctionCall("s1", "server_tool", {"p": 1})))
    for msg in sent:
        server_messages.validate(msg)
    assert [m["type"] for m in sent] == [
        "llm-function-call-started",
        "llm-function-call",
        "llm-function-call-started",
        "llm-function-call-in-progress",
    ], "only client-side calls use the legacy form (and never both: no double runs)"
    assert sent[1]["data"] == {"function_name": "where", "tool_call_id": "c1", "args": {"p": 1}}


def test_app_messages_become_server_messages() -> None:
    events, sent = observe()
    events.emit(AppMessage({"progress": 0.5}))
    assert sent == [{"label": "rtvi-ai", "type": "server-message", "data": {"progress": 0.5}}]


def test_events_without_data_map_to_their_messages() -> None:
    events, sent = observe()
    for event in (UserMuteStarted(1.0), UserMuteStopped(2.0), Interruption(3.0)):
        events.emit(event)
    for msg in sent:
        assert server_messages.validate(msg) is None
    assert [m["type"] for m in sent] == [
        "user-mute-started",
        "user-mute-stopped",
        "bot-interrupted",
    ]
