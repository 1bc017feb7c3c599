"""User and assistant aggregators on scripted event timelines."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from pipeline.aggregators import AssistantAggregator, UserAggregator
from pipeline.context.llm_context import LLMContext
from pipeline.context.summarizer import ContextSummarizer, SummarizerConfig
from pipeline.events import (
    AssistantThought,
    AssistantTranscript,
    AssistantTurnStarted,
    BotResponseEnded,
    BotStartedSpeaking,
    BotStoppedSpeaking,
    BotText,
    Emitter,
    Event,
    FunctionCall,
    FunctionCallCancelled,
    FunctionCallInProgress,
    FunctionCallResult,
    FunctionCallsStarted,
    Interruption,
    LLMResponseStarted,
    LLMRunRequested,
    LLMThoughtEnded,
    LLMThoughtStarted,
    LLMThoughtText,
    SummaryAppliedEvent,
    SummaryRequested,
    Transcription,
    UserTranscript,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.messages import AssistantMessage
from pipeline.tools import async_protocol as async_tools


class Bench:
    """An aggregator pair on one emitter, with a manual 'next event-loop step'."""

    def __init__(self) -> None:
        self.context = LLMContext([{"role": "system", "content": "Be brief."}])
        self.events = Emitter()
        self.seen: list[Event] = []
        self.later: list[Callable[[], None]] = []
        self.user = UserAggregator(self.context, self.events.emit, clock=lambda: "T")
        self.assistant = AssistantAggregator(
            self.context, self.events.emit, schedule=self.later.append, clock=lambda: "T"
        )
        for kind in (
            AssistantTurnStarted, AssistantTranscript, AssistantThought, UserTranscript,
            LLMRunRequested, FunctionCallCancelled,
        ):  # fmt: skip
            self.events.on(kind, self.seen.append)
        self.events.on(FunctionCallCancelled, self.assistant.handle)

    def feed(self, *events: Event) -> None:
        for event in events:
            if isinstance(event, Transcription | UserTurnStarted | UserTurnStopped):
                self.user.handle(event)
            self.assistant.handle(event)

    def step(self) -> None:
        """The event loop moves on: scheduled callbacks run."""
        pending, self.later[:] = list(self.later), []
        for callback in pending:
            callback()

    def runs(self) -> int:
        return sum(isinstance(e, LLMRunRequested) for e in self.seen)

    def wire(self) -> list[dict]:
        return self.context.to_openai()[1:]


@pytest.fixture
def bench() -> Bench:
    return Bench()


# -- user aggregator ----------------------------------------------------------------------


def test_final_transcripts_of_a_turn_become_one_user_message(bench: Bench) -> None:
    bench.feed(
        UserTurnStarted(1.0, "vad"),
        Transcription("What is", 1.5, final=False),
        Transcription("What is", 1.6),
        Transcription("two plus two?", 2.0),
        UserTurnStopped(2.4, "speech_timeout"),
    )
    assert bench.wire() == [{"role": "user", "content": "What is two plus two?"}]
    assert bench.seen == [
        UserTranscript("What is two plus two?", "T"),
        LLMRunRequested("user turn"),
    ]


def test_a_turn_without_text_adds_nothing_and_asks_for_no_answer(bench: Bench) -> None:
    bench.feed(UserTurnStarted(1.0, "vad"), Transcription("  ", 1.2), UserTurnStopped(2, "x"))
    assert bench.wire() == []
    assert bench.seen == [UserTranscript("", "T")]


def test_session_end_keeps_text_still_aggregating(bench: Bench) -> None:
    bench.feed(UserTurnStarted(1.0, "vad"), Transcription("hold on", 1.2))
    bench.user.close()
    assert bench.wire() == [{"role": "user", "content": "hold on"}]
    assert bench.runs() == 0


def test_typed_text_is_a_whole_turn(bench: Bench) -> None:
    bench.user.add_text("hello")
    bench.user.add_text("quietly", run_llm=False)
    assert [m["content"] for m in bench.wire()] == ["hello", "quietly"]
    assert bench.runs() == 1


# -- assistant aggregator: text ------------------------------------------------------------------


def test_spoken_sentences_become_one_assistant_message(bench: Bench) -> None:
    bench.feed(
        LLMResponseStarted(),
        BotText("Hello there."),
        BotText("How are you?"),
        BotResponseEnded(),
    )
    assert bench.wire() == [{"role": "assistant", "content": "Hello there. How are you?"}]
    assert bench.seen == [
        AssistantTurnStarted("T"),
        AssistantTranscript("Hello there. How are you?", False, "T"),
    ]


def test_streamed_tokens_keep_their_own_spacing(bench: Bench) -> None:
    tokens = ["Hel", "lo", ",", " wor", "ld", "!"]
    bench.feed(LLMResponseStarted(), *(BotText(t, False, True) for t in tokens), BotResponseEnded())
    assert bench.wire() == [{"role": "assistant", "content": "Hello, world!"}]


def test_interruption_keeps_only_what_was_spoken_marked_interrupted(bench: Bench) -> None:
    bench.feed(
        LLMResponseStarted(),
        BotText("The weather today is"),  # the words that went out before the flush
        Interruption(3.0),
        BotText("late text is not added"),
        BotResponseEnded(),
    )
    messages = bench.context.messages
    assert isinstance(messages[-1], AssistantMessage)
    assert messages[-1].interrupted is True
    assert messages[-1].text_content() == "The weather today is"
    assert bench.seen[-1] == AssistantTranscript("The weather today is", True, "T")


def test_interrupted_before_any_word_adds_no_message(bench: Bench) -> None:
    bench.feed(LLMResponseStarted(), Interruption(1.0))
    assert bench.wire() == []
    assert bench.seen[-1] == AssistantTranscript("", True, "T")


def test_turn_completion_markers_stay_out_of_the_transcript_only(bench: Bench) -> None:
    # As the reference: the context keeps them (see test_reference_parity.py).
    bench.feed(LLMResponseStarted(), BotText("✓ Four."), BotResponseEnded())
    assert bench.wire() == [{"role": "assistant", "content": "✓ Four."}]
    assert bench.seen[-1] == AssistantTranscript("Four.", False, "T")


def test_thoughts_reach_the_context_only_when_asked(bench: Bench) -> None:
    bench.feed(
        LLMThoughtStarted(llm="x", append_to_context=True),
        LLMThoughtText("Let me"),
        LLMThoughtText(" think."),
        LLMThoughtEnded(signature="sig"),
        LLMThoughtStarted(),
        LLMThoughtText("private"),
        LLMThoughtEnded(),
    )
    thoughts = [m for m in bench.context.messages if isinstance(m, AssistantMessage)]
    assert len(thoughts) == 1
    assert thoughts[0].thinking()[0].content == "Let me think."
    assert thoughts[0].thinking()[0].signature == "sig"
    assert [e for e in bench.seen if isinstance(e, AssistantThought)] == [
        AssistantThought("Let me think.", "T"),
        AssistantThought("private", "T"),
    ]


# -- assistant aggregator: function calls ------------------------------------------------------


def call(n: int, group: str | None = None, cancellable: bool = True) -> FunctionCall:
    return FunctionCall(f"call_{n}", "get_time", {"tz": "UTC"}, cancellable, group)


def start(bench: Bench, *calls: FunctionCall) -> None:
    bench.feed(FunctionCallsStarted(calls), *(FunctionCallInProgress(c) for c in calls))


def test_call_in_progress_then_result_and_one_run(bench: Bench) -> None:
    start(bench, call(1))
    assert bench.wire() == [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'},
                }
            ],
        },
        {"role": "tool", "content": "IN_PROGRESS", "tool_call_id": "call_1"},
    ]
    bench.feed(FunctionCallResult("call_1", "get_time", {"time": "12:00"}))
    assert bench.wire()[-1] == {
        "role": "tool",
        "content": '{"time": "12:00"}',
        "tool_call_id": "call_1",
    }
    assert bench.runs() == 0, "the run waits for the next event-loop step"
    bench.step()
    assert bench.runs() == 1
    assert not bench.assistant.has_function_calls_in_progress


def test_parallel_group_runs_the_llm_once_after_the_last_result(bench: Bench) -> None:
    start(bench, call(1, "g"), call(2, "g"))
    bench.feed(FunctionCallResult("call_1", "get_time", "a"))
    bench.step()
    assert bench.runs() == 0
    bench.feed(FunctionCallResult("call_2", "get_time", "b"))
    bench.step()
    assert bench.runs() == 1


def test_results_arriving_together_are_bundled_into_one_run(bench: Bench) -> None:
    start(bench, call(1), call(2))
    bench.feed(
        FunctionCallResult("call_1", "get_time", "a"),
        FunctionCallResult("call_2", "get_time", "b"),
    )
    bench.step()
    assert bench.runs() == 1


def test_results_while_the_bot_speaks_wait_until_it_stops(bench: Bench) -> None:
    start(bench, call(1), call(2))
    bench.feed(BotStartedSpeaking(1.0), FunctionCallResult("call_1", "get_time", "a"))
    bench.step()
    bench.feed(FunctionCallResult("call_2", "get_time", "b"))
    bench.step()
    assert bench.runs() == 0
    bench.feed(BotStoppedSpeaking(2.0))
    bench.step()
    assert bench.runs() == 1


def test_results_while_the_user_speaks_run_nothing(bench: Bench) -> None:
    start(bench, call(1))
    bench.feed(UserTurnStarted(1.0, "vad"), FunctionCallResult("call_1", "get_time", "a"))
    bench.step()
    assert bench.runs() == 0


@pytest.mark.parametrize(
    ("result", "run_llm", "runs"),
    [("x", False, 0), (None, True, 0), (None, None, 0), ("x", None, 1), ("x", True, 1)],
)
def test_run_llm_override(bench: Bench, result: object, run_llm: bool | None, runs: int) -> None:
    start(bench, call(1))
    bench.feed(FunctionCallResult("call_1", "get_time", result, run_llm=run_llm))
    bench.step()
    assert bench.runs() == runs
    if result is None:
        assert bench.wire()[-1]["content"] == "COMPLETED"


def test_interruption_cancels_cancellable_calls_only(bench: Bench) -> None:
    start(bench, call(1), call(2, cancellable=False))
    bench.feed(Interruption(1.0))
    assert bench.context.find_tool_message("call_1").content == "CANCELLED"
    started = async_tools.parse_message(bench.context.find_tool_message("call_2"))
    assert started is not None and started.kind == "started"
    assert bench.assistant.has_function_calls_in_progress  # call_2 goes on
    bench.feed(FunctionCallResult("call_1", "get_time", "too late"))
    assert bench.context.find_tool_message("call_1").content == "CANCELLED"


def test_async_tool_message_sequence(bench: Bench) -> None:
    start(bench, call(7, cancellable=False))
    bench.feed(
        FunctionCallResult("call_7", "get_time", {"progress": 50}, is_final=False),
        FunctionCallResult("call_7", "get_time", {"done": True}),
    )
    wire = bench.wire()
    assert wire[1]["role"] == "tool" and wire[1]["tool_call_id"] == "call_7"
    kinds = [async_tools.parse_message(m) for m in wire[1:]]
    assert [(k.kind, k.status, k.result) for k in kinds] == [
        ("started", "running", None),
        ("intermediate", "running", json.dumps({"progress": 50})),
        ("final", "finished", json.dumps({"done": True})),
    ]
    assert [m["role"] for m in wire[2:]] == ["developer", "developer"]
    bench.step()
    assert bench.runs() == 1, "progress and the final result arrived together: one run"


def test_result_for_an_unknown_call_is_ignored(bench: Bench) -> None:
    bench.feed(FunctionCallResult("nope", "get_time", "x"))
    bench.step()
    assert bench.wire() == [] and bench.runs() == 0


# -- assistant aggregator: summarization ----------------------------------------------------------


def test_summary_is_requested_after_a_turn_and_applied() -> None:
    bench = Bench()
    config = SummarizerConfig(auto_trigger=True, max_unsummarized_messages=6, keep_last=2)
    bench.assistant.summarizer = ContextSummarizer(config)
    requests: list[SummaryRequested] = []
    applied: list[SummaryAppliedEvent] = []
    bench.events.on(SummaryRequested, requests.append)
    bench.events.on(SummaryAppliedEvent, applied.append)
    for n in range(4):
        bench.feed(UserTurnStarted(n, "vad"), Transcription(f"question {n}", n))
        bench.feed(UserTurnStopped(n + 0.5, "vad"))
        bench.feed(LLMResponseStarted(), BotText(f"answer {n}."), BotResponseEnded())
    assert len(requests) == 1, "one request at a time, after an assistant turn"
    request = requests[0].request
    assert bench.assistant.apply_summary(request, "They asked four questions.")
    wire = bench.context.to_openai()
    assert wire[0] == {"role": "system", "content": "Be brief."}
    assert wire[1]["role"] == "user" and "They asked four questions." in wire[1]["content"]
    # Requested after the third exchange (keeping its last two messages); the fourth
    # exchange came in while the summary was being written, and is kept too.
    kept = ["question 2", "answer 2.", "question 3", "answer 3."]
    assert [m["content"] for m in wire[2:]] == kept
    assert applied[0].applied.summarized_message_count == len(request.messages)
    # The same request cannot be applied twice.
    assert not bench.assistant.apply_summary(request, "again")


def test_interrupted_turns_do_not_trigger_summaries() -> None:
    bench = Bench()
    config = SummarizerConfig(auto_trigger=True, max_unsummarized_messages=1, keep_last=0)
    bench.assistant.summarizer = ContextSummarizer(config)
    requests: list[SummaryRequested] = []
    bench.events.on(SummaryRequested, requests.append)
    bench.feed(LLMResponseStarted(), BotText("Well"), Interruption(1.0))
    assert requests == []
