"""What one client's messages may make the server keep (issue 22, item 2): the context
within its budget whenever it grows, the record within its budget, a session's
description within bounds, and every reply within the data channel's size, or refused.

Unit tests on the parts, then one real server (subprocess, no models needed) flooded
with typed text that asks for no answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipeline.context.budget import (
    CUT_MARK,
    ContextBudget,
    ContextBudgetParams,
    history_tokens,
    trim_to_budget,
)
from pipeline.context.llm_context import LLMContext
from pipeline.conversation import Conversation
from pipeline.events import AssistantTranscript, UserTranscript
from pipeline.messages import AssistantMessage, SystemMessage, UserMessage
from pipeline.services.llm import FixedText
from server.rtvi import server_messages
from server.rtvi.handler import ClientMessages, RTVIHandler, RTVISession
from server.rtvi.protocol import ClientReadyData, FunctionCallResultData, SendTextData
from server.session.voice import _latest_transcript
from server.storage.recorder import SessionRecorder
from server.storage.sqlite import SQLiteTranscriptStore
from server.storage.store import ClientInfo
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess

SYSTEM = SystemMessage("You are Parley.")
WORDS = "the weather was lovely and the train was on time "  # 49 characters

# -- the context --------------------------------------------------------------------------


async def test_typed_text_that_asks_for_no_answer_keeps_the_context_within_budget() -> None:
    """The budget held only before an LLM run: text typed with ``run_immediately: false``
    grew the context without end."""
    context = LLMContext([SYSTEM])
    conversation = Conversation(context, FixedText("unused"))
    budget = ContextBudget(context, conversation.llm, conversation.events.emit,
                           ContextBudgetParams(max_tokens=300, summarize=False))  # fmt: skip
    budget.attach(conversation.events)
    for i in range(100):
        conversation.user.add_text(f"{i} {WORDS * 4}", run_llm=False)
        assert history_tokens(context.messages) <= 300
    assert context.messages[-1].text_content().startswith("99 ")
    assert budget.info()["dropped_messages"] > 80
    await budget.close()


async def test_an_answer_added_is_held_to_the_budget_too() -> None:
    context = LLMContext([SYSTEM, *[UserMessage.text(WORDS * 4) for _ in range(3)]])
    conversation = Conversation(context, FixedText("unused"))
    budget = ContextBudget(context, conversation.llm, conversation.events.emit,
                           ContextBudgetParams(max_tokens=200, summarize=False))  # fmt: skip
    budget.attach(conversation.events)
    context.add_message(AssistantMessage.text(WORDS * 4))
    conversation.events.emit(AssistantTranscript(WORDS * 4, False, "t"))
    assert history_tokens(context.messages) <= 200


def test_a_newest_text_larger_than_the_whole_budget_is_cut_to_fit() -> None:
    pasted = UserMessage.text("x" * 20_000)
    context = LLMContext([SYSTEM, UserMessage.text(WORDS), pasted])
    trim_to_budget(context, 500)
    assert history_tokens(context.messages) <= 500
    assert context.messages[-1] is pasted, "the same message, shortened in place"
    assert pasted.text_content().startswith("xxx") and pasted.text_content().endswith(CUT_MARK)


# -- the record ---------------------------------------------------------------------------


def files_bytes(folder: Path) -> int:
    """The database with its write-ahead log."""
    return sum(f.stat().st_size for f in folder.iterdir())


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteTranscriptStore]:
    opened = SQLiteTranscriptStore(tmp_path)
    await opened.start()
    yield opened
    await opened.close()


async def test_one_call_writes_at_most_its_budget_and_says_what_it_left_out(
    store: SQLiteTranscriptStore, tmp_path: Path
) -> None:
    conversation = Conversation(LLMContext([]), FixedText("unused"))
    recorder = SessionRecorder(store, "pc", None, ClientInfo(), max_bytes=64 * 1024,
                               max_entries=1000)  # fmt: skip
    recorder.observe(conversation)
    text = "y" * 4096
    for _ in range(200):  # 800 KB typed
        conversation.events.emit(UserTranscript(text, "t"))
    recorder.close("hung up")
    record = await store.get("pc")
    assert record is not None
    assert 10 <= len(record.turns) <= 16, "64 KB of 4 KB turns"
    types = [e.type for e in record.events]
    assert types == ["record-truncated", "record-skipped"]
    skipped = record.events[1].data
    assert skipped["turns"] == 200 - len(record.turns) and skipped["bytes"] > 700_000
    assert record.ended_at is not None, "the end is always written"
    assert files_bytes(tmp_path) < 400_000, "not the 800 KB that was typed"


async def test_the_entry_budget_counts_events_as_well(store: SQLiteTranscriptStore) -> None:
    conversation = Conversation(LLMContext([]), FixedText("unused"))
    recorder = SessionRecorder(store, "pc", None, ClientInfo(), max_entries=10)
    recorder.observe(conversation)
    for i in range(30):
        conversation.events.emit(UserTranscript(f"turn {i}", "t"))
        conversation.events.emit(AssistantTranscript(f"answer {i}", True, "t"))
    recorder.close("hung up")
    record = await store.get("pc")
    assert record is not None
    assert len(record.turns) == 10
    assert record.events[-1].type == "record-skipped"
    assert record.events[-1].data["turns"] == 50


# -- what a session's description carries -------------------------------------------------


def test_the_description_carries_the_latest_messages_and_says_how_many_it_left_out() -> None:
    messages = [SYSTEM] + [UserMessage.text(f"message {i}") for i in range(100)]
    transcript, omitted = _latest_transcript(messages, max_messages=5, max_bytes=10_000)
    assert [m["content"] for m in transcript] == [f"message {i}" for i in range(95, 100)]
    assert omitted == 95
    transcript, omitted = _latest_transcript(messages, max_messages=50, max_bytes=35)
    assert [m["content"] for m in transcript] == ["message 97", "message 98", "message 99"]
    assert omitted == 97
    huge = [UserMessage.text("z" * 50_000)]
    transcript, omitted = _latest_transcript(huge, max_messages=5, max_bytes=1024)
    assert transcript == [{"role": "user", "content": "z" * 1024, "cut": True}]
    assert omitted == 0


# -- replies --------------------------------------------------------------------------------


class RecordingSession:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, msg: dict[str, Any]) -> None:
        server_messages.validate(msg)
        self.sent.append(msg)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        return asyncio.create_task(coro, name=name)

    def set_client(self, ready: ClientReadyData) -> None: ...

    def send_text(self, data: SendTextData) -> None: ...

    def request_close(self, reason: str) -> None: ...

    def info(self) -> dict[str, Any]:
        return {"transcript": ["\U0001f600" * 4000] * 10}  # 480 KB as ASCII JSON

    def client_tool_result(self, data: FunctionCallResultData) -> None: ...

    def send_server_message(self, data: Any) -> None: ...


async def test_a_reply_too_large_or_not_json_is_an_error_response_not_silence() -> None:
    handlers = ClientMessages.with_defaults()

    @handlers.on("deep")
    async def deep(session: RTVISession, d: Any) -> Any:
        value: Any = 1
        for _ in range(300):
            value = [value]
        return value

    session = RecordingSession()
    handler = RTVIHandler(session, handlers)
    handler.handle({"label": "rtvi-ai", "type": "client-message", "id": "big",
                    "data": {"t": "session-info"}})  # fmt: skip
    handler.handle({"label": "rtvi-ai", "type": "client-message", "id": "deep",
                    "data": {"t": "deep"}})  # fmt: skip
    await asyncio.sleep(0.05)
    by_id = {m["id"]: m for m in session.sent}
    assert by_id["big"]["type"] == "error-response"
    assert "reply is too large" in by_id["big"]["data"]["error"]
    assert "limit 65536" in by_id["big"]["data"]["error"]
    assert by_id["deep"]["type"] == "error-response"
    assert "not JSON" in by_id["deep"]["data"]["error"]
    assert all(len(json.dumps(m)) <= 65536 for m in session.sent)


# -- a real server, flooded -----------------------------------------------------------------

LIMITS = {
    "context_max_tokens": "4000",
    "max_record_entries": "30",
    "info_transcript_messages": "5",
}


@pytest.fixture(scope="module")
def limited(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server(**LIMITS)


@pytest.mark.e2e
async def test_a_flood_of_typed_text_stays_within_every_budget(limited: ServerProcess) -> None:
    async with RTCTestClient(limited.url) as client:
        queued = {"run_immediately": False}
        for i in range(60):  # 600 characters, about 160 tokens each: 9,600 in all
            client.send_rtvi("send-text", {"content": f"{i} " + "w" * 600, "options": queued})
            await asyncio.sleep(1 / 12)  # under the data channel's 20 a second
        asked = client.send_rtvi("client-message", {"t": "session-info"})
        reply = await client.wait_for(lambda m: m.get("id") == asked)
        # An echo whose ASCII JSON is three times the 64 KB that came in.
        echo = json.dumps({"label": "rtvi-ai", "type": "client-message", "id": "echo",
                           "data": {"t": "echo", "d": "\U0001f600" * 16_000}},
                          ensure_ascii=False)  # fmt: skip
        client.send_raw(echo)
        echoed = await client.wait_for(lambda m: m.get("id") == "echo")
        async with httpx.AsyncClient(base_url=limited.url) as http:
            described = (await http.get(f"/api/sessions/{client.pc_id}")).json()
            await http.delete(f"/api/sessions/{client.pc_id}")
            record = (await http.get(f"/api/sessions/{client.pc_id}/transcript")).json()
    conversation = described["conversation"]
    assert conversation["context"]["tokens"] <= 4000 < 60 * 160
    assert len(conversation["transcript"]) == 5
    assert conversation["transcript"][-1]["content"].startswith("59 ")
    assert conversation["transcript_omitted"] > 10
    assert reply["type"] == "server-response", "answered, not dropped for its size"
    assert len(reply["data"]["d"]["conversation"]["transcript"]) == 5
    assert echoed["type"] == "error-response" and "too large" in echoed["data"]["error"]
    assert len(record["turns"]) <= 30
    events = {e["type"]: e["data"] for e in record["events"]}
    assert events["record-skipped"]["turns"] == 60 - len(record["turns"])
    assert "record-truncated" in events
