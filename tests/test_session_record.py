"""The session recorder: conversation events in, a record in a real (SQLite) store out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.context.llm_context import LLMContext
from pipeline.conversation import Conversation
from pipeline.conversation_params import ConversationParams
from pipeline.events import (
    AssistantTranscript,
    FunctionCall,
    FunctionCallCancelled,
    FunctionCallInProgress,
    FunctionCallResult,
    Interruption,
    Metric,
    ServiceError,
    UserTranscript,
)
from pipeline.messages import Usage
from pipeline.services.llm import FixedText
from pipeline.session_metrics import Prices
from server.storage.recorder import MAX_REJECTED_REASONS, SessionRecorder
from server.storage.sqlite import SQLiteTranscriptStore
from server.storage.store import ClientInfo

T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        self.now += 1
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteTranscriptStore]:
    opened = SQLiteTranscriptStore(tmp_path)
    await opened.start()
    yield opened
    await opened.close()


def recorded(
    store: SQLiteTranscriptStore, prices: Prices | None = None
) -> tuple[SessionRecorder, Conversation]:
    params = ConversationParams(prices=prices)
    conversation = Conversation(LLMContext([]), FixedText("unused"), params=params)
    client = ClientInfo(remote_addr="10.0.0.1", user_agent="test-agent")
    recorder = SessionRecorder(store, "pc", "start", client, clock=Clock())
    recorder.observe(conversation)
    return recorder, conversation


async def test_turns_carry_their_own_metrics(store: SQLiteTranscriptStore) -> None:
    _, conversation = recorded(store, Prices(input=1.0, output=2.0))
    emit = conversation.events.emit
    emit(UserTranscript("", "t0"))  # a turn with nothing heard: no turn recorded
    emit(UserTranscript("Hello?", "t1"))
    emit(Metric("llm", "ttfb", 0.25))
    emit(Metric("llm", "tokens", Usage(input_tokens=1_000, output_tokens=500)))
    emit(Metric("tts", "characters", 11))
    emit(AssistantTranscript("Hello there", False, "t2"))
    emit(Metric("llm", "ttfb", 0.5))
    emit(AssistantTranscript("Second", False, "t3"))

    record = await store.get("pc")
    assert record is not None
    assert [(t.role, t.text, t.started_at) for t in record.turns] == [
        ("user", "Hello?", "t1"),
        ("assistant", "Hello there", "t2"),
        ("assistant", "Second", "t3"),
    ]
    first, second = record.turns[1].metrics, record.turns[2].metrics
    assert first is not None and second is not None
    assert first["ttfb"] == {"llm": 0.25} and first["tts_characters"] == 11
    assert first["usage"]["total_tokens"] == 1_500
    assert first["usage"]["cost_usd"] == pytest.approx(0.002)
    assert second["ttfb"] == {"llm": 0.5} and second["usage"]["total_tokens"] == 0
    assert record.usage["usage"]["total_tokens"] == 1_500  # the session's totals


async def test_interruptions_tools_and_errors_become_events(
    store: SQLiteTranscriptStore,
) -> None:
    _, conversation = recorded(store)
    emit = conversation.events.emit
    call = FunctionCall("call_1", "get_current_time", {"timezone": "UTC"})
    emit(FunctionCallInProgress(call))
    emit(FunctionCallResult("call_1", "get_current_time", {"time": "noon"}))
    emit(FunctionCallCancelled("call_2", "research_topic"))
    emit(Interruption(1.0))
    emit(AssistantTranscript("", True, "t"))  # interrupted before a word went out
    emit(AssistantTranscript("Half a sen", True, "t"))
    emit(ServiceError("tts", "boom"))

    record = await store.get("pc")
    assert record is not None
    assert [(t.text, t.interrupted) for t in record.turns] == [("Half a sen", True)]
    assert [(e.type, e.data) for e in record.events] == [
        (
            "tool-call",
            {
                "tool_call_id": "call_1",
                "function_name": "get_current_time",
                "arguments": {"timezone": "UTC"},
            },
        ),
        (
            "tool-result",
            {
                "tool_call_id": "call_1",
                "function_name": "get_current_time",
                "result": {"time": "noon"},
                "final": True,
            },
        ),
        ("tool-cancelled", {"tool_call_id": "call_2", "function_name": "research_topic"}),
        ("interruption", {}),
        ("error", {"service": "tts", "error": "boom", "fatal": False}),
    ]


async def rejected_events(store: SQLiteTranscriptStore) -> list[dict[str, Any]]:
    record = await store.get("pc")
    assert record is not None
    return [e.data for e in record.events if e.type == "rejected-messages"]


async def test_rejected_messages_are_written_as_counts(store: SQLiteTranscriptStore) -> None:
    """Not a write per rejected message: counts, at most every flush interval and at the
    end, and none lost."""
    client = ClientInfo(remote_addr="10.0.0.1")
    recorder = SessionRecorder(store, "pc", None, client, clock=Clock(), rejected_flush_seconds=0.3)
    for _ in range(50):
        recorder.rejected("malformed JSON", "malformed JSON")
    for i in range(20):  # reasons that name what the client sent: bounded
        recorder.rejected(f"ui-event 'e{i}' failed", f"ui-event 'e{i}' failed: boom")
    assert await rejected_events(store) == [], "nothing written per message"
    await asyncio.sleep(0.5)
    [first] = await rejected_events(store)
    assert first["total"] == 70
    assert first["counts"]["malformed JSON"] == 50
    assert len(first["counts"]) == MAX_REJECTED_REASONS
    assert first["counts"]["other"] == 70 - 50 - (MAX_REJECTED_REASONS - 2)
    assert first["examples"]["ui-event 'e0' failed"] == "ui-event 'e0' failed: boom"

    recorder.rejected("message too large", "message too large: 70000 bytes (limit 65536)")
    recorder.close("deleted")  # flushes what is left, without waiting for the interval
    recorder.rejected("malformed JSON", "malformed JSON")  # after the end: ignored
    events = await rejected_events(store)
    assert [e["counts"] for e in events[1:]] == [{"message too large": 1}]
    await asyncio.sleep(0.5)
    assert len(await rejected_events(store)) == 2


async def test_client_and_end_are_recorded_once(store: SQLiteTranscriptStore) -> None:
    recorder, _ = recorded(store)
    client = ClientInfo(remote_addr="10.0.0.1", library="@pipecat-ai/client-js")
    client.library_version = "1.13.0"
    recorder.client_updated(client)
    recorder.close("deleted")
    recorder.close("server shutdown")  # a second close changes nothing
    record = await store.get("start")
    assert record is not None and record.id == "pc" and not record.live
    assert record.close_reason == "deleted"
    assert record.client["library_version"] == "1.13.0"
    assert record.client["remote_addr"] == "10.0.0.1"
