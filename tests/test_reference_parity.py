"""Where Parley used to contradict the reference (Pipecat's aggregators, the message layer,
the RTVI table): each test pins the reference's behaviour."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any

import pytest

from pipeline.aggregators import AssistantAggregator
from pipeline.context.llm_context import LLMContext
from pipeline.context.openai_messages import from_openai, to_openai
from pipeline.conversation import Conversation
from pipeline.conversation_params import ConversationParams
from pipeline.events import (
    AssistantTranscript,
    BotResponseEnded,
    BotText,
    Emitter,
    Event,
    FunctionCall,
    FunctionCallInProgress,
    FunctionCallResult,
    FunctionCallsStarted,
    Interruption,
    LLMMarker,
    LLMResponseEnded,
    LLMResponseStarted,
    LLMRunRequested,
)
from pipeline.messages import (
    AssistantMessage,
    SystemMessage,
    ToolMessage,
    ToolResultContent,
    Usage,
)
from pipeline.reply.bot_turn import BotTurn
from pipeline.services.llm import LLMChunk, LLMStream, TextDelta, UsageReport
from pipeline.services.openai_llm import OpenAILLM
from pipeline.ui.protocol import UICommandData, UIJobCompletedData, UIJobGroupStartedData
from server.rtvi import protocol, server_messages
from testkit.openai_stub import (
    ChatReply,
    OpenAIStub,
    openai_stub_fixture,  # noqa: F401  (the ``openai_stub`` fixture)
)
from testkit.openai_stub import ToolCall as StubToolCall


class Bench:
    """An assistant aggregator with a manual 'next event-loop step'."""

    def __init__(self) -> None:
        self.context = LLMContext([{"role": "system", "content": "Be brief."}])
        self.events = Emitter()
        self.seen: list[Event] = []
        self.later: list[Callable[[], None]] = []
        self.assistant = AssistantAggregator(
            self.context, self.events.emit, schedule=self.later.append, clock=lambda: "T"
        )
        self.events.on(LLMRunRequested, self.seen.append)
        self.events.on(AssistantTranscript, self.seen.append)

    def feed(self, *events: Event) -> None:
        for event in events:
            self.assistant.handle(event)

    def step(self) -> int:
        """The event loop moves on; returns how many LLM runs were asked for so far."""
        pending, self.later[:] = list(self.later), []
        for callback in pending:
            callback()
        return sum(isinstance(e, LLMRunRequested) for e in self.seen)

    def transcripts(self) -> list[AssistantTranscript]:
        return [e for e in self.seen if isinstance(e, AssistantTranscript)]

    def assistant_messages(self) -> list[AssistantMessage]:
        return [m for m in self.context.messages if isinstance(m, AssistantMessage)]


def start_call(bench: Bench, tool_call_id: str, cancellable: bool = True) -> None:
    call = FunctionCall(tool_call_id, "lookup", {}, cancellable)
    bench.feed(FunctionCallsStarted((call,)), FunctionCallInProgress(call))


# -- tool results -------------------------------------------------------------------------


@pytest.mark.parametrize("result", [{}, [], 0, "", False], ids=repr)
def test_a_falsy_result_is_stored_as_completed(result: object) -> None:
    # Reference: ``json.dumps(result) if result else "COMPLETED"``.
    bench = Bench()
    start_call(bench, "c1")
    bench.feed(FunctionCallResult("c1", "lookup", result))
    assert bench.context.find_tool_message("c1").content == "COMPLETED"  # type: ignore[union-attr]


def test_a_falsy_async_result_is_a_completed_final_message() -> None:
    bench = Bench()
    start_call(bench, "c1", cancellable=False)
    bench.feed(FunctionCallResult("c1", "lookup", {}))
    assert '"result": "COMPLETED"' in bench.context.to_openai()[-1]["content"]


def test_a_falsy_intermediate_result_adds_nothing() -> None:
    bench = Bench()
    start_call(bench, "c1", cancellable=False)
    before = len(bench.context.messages)
    bench.feed(FunctionCallResult("c1", "lookup", [], is_final=False))
    assert len(bench.context.messages) == before


@pytest.mark.parametrize("result", [None, {}, 0], ids=repr)
def test_run_llm_is_ignored_without_a_result(result: object) -> None:
    # Reference: the run_llm override is consulted only ``if frame.result``.
    bench = Bench()
    start_call(bench, "c1")
    bench.feed(FunctionCallResult("c1", "lookup", result, run_llm=True))
    assert bench.step() == 0


def test_run_llm_still_overrides_with_a_result() -> None:
    bench = Bench()
    start_call(bench, "c1")
    bench.feed(FunctionCallResult("c1", "lookup", {"a": 1}, run_llm=False))
    assert bench.step() == 0
    start_call(bench, "c2")
    bench.feed(FunctionCallResult("c2", "lookup", "x", run_llm=True))
    assert bench.step() == 1


# -- turn-completion markers ----------------------------------------------------------------


def test_the_complete_marker_stays_in_the_context_but_not_in_the_transcript() -> None:
    bench = Bench()
    bench.feed(LLMResponseStarted(), LLMMarker("✓"), BotText("Four."), BotResponseEnded())
    assert bench.context.to_openai()[-1] == {"role": "assistant", "content": "✓ Four."}
    assert bench.transcripts() == [AssistantTranscript("Four.", False, "T")]


@pytest.mark.parametrize("marker", ["○", "◐"])
def test_an_incomplete_marker_is_the_whole_context_entry(marker: str) -> None:
    bench = Bench()
    bench.feed(LLMResponseStarted(), LLMMarker(marker), BotResponseEnded())
    assert bench.context.to_openai()[-1] == {"role": "assistant", "content": marker}
    assert bench.transcripts() == [AssistantTranscript("", False, "T")]


def test_an_interrupted_answer_keeps_its_marker_in_the_context() -> None:
    bench = Bench()
    bench.feed(LLMResponseStarted(), LLMMarker("✓"), BotText("The weather is"), Interruption(1))
    assert bench.context.to_openai()[-1] == {"role": "assistant", "content": "✓ The weather is"}
    assert bench.transcripts() == [AssistantTranscript("The weather is", True, "T")]


def test_markers_in_the_text_itself_stay_in_the_context_only() -> None:
    bench = Bench()
    bench.feed(LLMResponseStarted(), BotText("✓ Four."), BotResponseEnded())
    assert bench.context.to_openai()[-1]["content"] == "✓ Four."
    assert bench.transcripts()[-1].content == "Four."


async def test_a_filtered_turn_puts_the_marker_in_the_context_end_to_end() -> None:
    context = LLMContext([{"role": "system", "content": "Be brief."}])
    params = ConversationParams(filter_incomplete_user_turns=True)
    conv = Conversation(context, ScriptedLLM(["✓ ", "Four."]), params=params)
    transcripts: list[AssistantTranscript] = []
    conv.events.on(AssistantTranscript, transcripts.append)
    conv.user.add_text("What is two plus two?")
    await until(lambda: bool(transcripts))
    await conv.close()
    assert context.to_openai()[-1] == {"role": "assistant", "content": "✓ Four."}
    assert transcripts[0].content == "Four."


# -- the end of a session ---------------------------------------------------------------------


def test_the_end_of_a_session_does_not_mark_the_turn_interrupted() -> None:
    # Reference: an EndFrame stops the turn with ``interrupted=False``.
    bench = Bench()
    bench.feed(LLMResponseStarted(), BotText("Goodbye for now."))
    bench.assistant.close()
    [message] = bench.assistant_messages()
    assert message.text_content() == "Goodbye for now." and not message.interrupted
    assert bench.transcripts() == [AssistantTranscript("Goodbye for now.", False, "T")]


def test_a_cancellation_marks_the_turn_interrupted() -> None:
    # Reference: a CancelFrame stops the turn with ``interrupted=True``.
    bench = Bench()
    bench.feed(LLMResponseStarted(), BotText("Goodbye"))
    bench.assistant.cancel()
    [message] = bench.assistant_messages()
    assert message.interrupted and message.stop_reason == "interrupted"


# -- usage and stop reason on the assistant message ---------------------------------------------


def test_the_assistant_message_carries_the_llm_usage_and_stop_reason() -> None:
    bench = Bench()
    usage = Usage(input_tokens=12, output_tokens=5)
    bench.feed(
        LLMResponseStarted(),
        BotText("Four."),
        LLMResponseEnded(usage=usage, stop_reason="length"),
        BotResponseEnded(),
    )
    [message] = bench.assistant_messages()
    assert message.usage == usage and message.stop_reason == "length"


def test_an_interrupted_message_says_so_in_its_stop_reason() -> None:
    bench = Bench()
    bench.feed(LLMResponseStarted(), BotText("The weather"), Interruption(1.0))
    [message] = bench.assistant_messages()
    assert message.stop_reason == "interrupted"


class ScriptedLLM:
    """Streams fixed chunks, a usage report, and says why it stopped."""

    supports_tools = False

    def __init__(self, chunks: list[str], finish_reason: str | None = "stop") -> None:
        self.chunks = chunks
        self.finish_reason = finish_reason

    def stream(self, messages: Any, tools: Any = None, tool_choice: Any = None) -> LLMStream:
        async def body(call: LLMStream) -> AsyncGenerator[LLMChunk, None]:
            for chunk in self.chunks:
                await asyncio.sleep(0)
                call.first_token()
                yield TextDelta(chunk)
            call.finish_reason = self.finish_reason
            yield UsageReport(Usage(input_tokens=20, output_tokens=len(self.chunks)))

        return LLMStream(body)


async def until(condition: Callable[[], bool], within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not condition():
            await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason"), [("length", "length"), ("stop", "stop"), (None, "stop")]
)
async def test_a_bot_turn_reports_usage_and_why_the_llm_stopped(
    finish_reason: str | None, stop_reason: str
) -> None:
    context = LLMContext([{"role": "user", "content": "Count."}])
    ended: list[LLMResponseEnded] = []
    events = Emitter()
    events.on(LLMResponseEnded, ended.append)
    await BotTurn(context, ScriptedLLM(["One, ", "two."], finish_reason), events.emit).run()
    assert ended == [LLMResponseEnded(Usage(input_tokens=20, output_tokens=2), stop_reason)]


async def test_usage_and_stop_reason_reach_the_context_end_to_end() -> None:
    context = LLMContext([{"role": "system", "content": "Be brief."}])
    conv = Conversation(context, ScriptedLLM(["Fine, ", "thanks."], "length"))
    conv.user.add_text("How are you?")
    await until(lambda: isinstance(context.messages[-1], AssistantMessage))
    await conv.close()
    message = context.messages[-1]
    assert isinstance(message, AssistantMessage)
    assert message.text_content() == "Fine, thanks."
    assert message.usage == Usage(input_tokens=20, output_tokens=2)
    assert message.stop_reason == "length"


@pytest.mark.parametrize(
    ("reply", "finish_reason"),
    [
        (ChatReply("Sunny."), "stop"),
        (ChatReply("", (StubToolCall("get_weather", {"city": "Paris"}),)), "tool_calls"),
    ],
)
async def test_the_openai_service_reports_the_finish_reason(
    openai_stub: OpenAIStub, reply: ChatReply, finish_reason: str
) -> None:
    openai_stub.script_chat(reply)
    llm = OpenAILLM("m", base_url=openai_stub.base_url, api_key=openai_stub.api_key)
    try:
        stream = llm.stream([{"role": "user", "content": "Weather?"}])
        async with aclosing(stream) as chunks:
            async for _ in chunks:
                pass
        assert stream.finish_reason == finish_reason
    finally:
        await llm.aclose()


# -- the message layer --------------------------------------------------------------------------


def test_a_tool_message_holds_several_results() -> None:
    first = ToolResultContent(id="c1", content="18C")
    second = ToolResultContent(id="c2", content="rain")
    message = ToolMessage.from_results([first, second])
    assert message.contents == [first, second]
    assert to_openai([message]) == [
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
    ]


def test_a_tool_message_of_one_result_keeps_its_shorthand() -> None:
    message = ToolMessage.from_result(ToolResultContent(id="c1", content="18C"))
    assert (message.tool_call_id, message.content) == ("c1", "18C")
    assert ToolMessage(tool_call_id="c1", content="18C").contents == message.contents
    parsed = from_openai({"role": "tool", "tool_call_id": "c1", "content": "18C"})
    assert isinstance(parsed, ToolMessage) and parsed.contents == message.contents


def test_every_result_of_a_tool_message_is_found_and_counted() -> None:
    context = LLMContext()
    message = ToolMessage.from_results(
        [ToolResultContent(id="c1", content="IN_PROGRESS"), ToolResultContent(id="c2", content="x")]
    )
    context.add_message(message)
    assert context.find_tool_message("c2") is message
    assert context.set_tool_result("c2", "done")
    assert [r.content for r in message.contents] == ["IN_PROGRESS", "done"]


def test_system_message_text_factory() -> None:
    message = SystemMessage.text("You are a helpful assistant.")
    assert isinstance(message, SystemMessage)
    assert message.content == "You are a helpful assistant."
    assert to_openai([message]) == [{"role": "system", "content": "You are a helpful assistant."}]


# -- the RTVI table ---------------------------------------------------------------------------


def test_ui_command_and_ui_job_group_are_in_the_validation_table() -> None:
    # Built the way server.rtvi.ui_worker sends them.
    command = protocol.message(
        "ui-command", UICommandData(command="toast", payload={"t": 1}).model_dump()
    )
    started = protocol.message(
        "ui-job-group", UIJobGroupStartedData(job_id="j1", workers=["a"], label="x").model_dump()
    )
    done = protocol.message(
        "ui-job-group", UIJobCompletedData(job_id="j1", worker_name="a", status="ok").model_dump()
    )
    assert server_messages.validate(command).command == "toast"
    assert server_messages.validate(started).kind == "group_started"
    assert server_messages.validate(done).status == "ok"


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "group_exploded", "job_id": "j"},
        {"job_id": "j"},
        {"kind": "job_update", "job_id": "j"},  # no worker_name
        {"kind": "group_completed", "job_id": "j", "at": 1, "extra": True},
    ],
)
def test_a_malformed_ui_job_group_is_refused(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        server_messages.validate({"label": "rtvi-ai", "type": "ui-job-group", "data": data})


def test_a_ui_command_without_a_command_is_refused() -> None:
    with pytest.raises(ValueError):
        server_messages.validate({"label": "rtvi-ai", "type": "ui-command", "data": {"payload": 1}})
