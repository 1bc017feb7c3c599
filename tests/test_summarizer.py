"""Context summarization: the trigger, what is summarized, applying, and stale requests."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.context.llm_context import TOOL_IN_PROGRESS, LLMContext
from pipeline.context.summarizer import (
    DEFAULT_SUMMARIZATION_PROMPT,
    ContextSummarizer,
    StaleSummaryError,
    SummarizerConfig,
)
from pipeline.messages import (
    AssistantMessage,
    CompactionSummaryMessage,
    CustomMessage,
    Message,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from pipeline.tools import async_protocol as async_tools

SYSTEM = SystemMessage("You are Parley.")


def turns(n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        out += [UserMessage.text(f"u{i}"), AssistantMessage.text(f"a{i}")]
    return out


def summarizer(**config: Any) -> ContextSummarizer:
    config.setdefault("keep_last", 2)
    return ContextSummarizer(SummarizerConfig(**config))


def call(call_id: str) -> AssistantMessage:
    return AssistantMessage([ToolCallContent(id=call_id, name="get_weather", args={"city": "P"})])


def texts(context: LLMContext) -> list[Any]:
    return [m.get("content") for m in context.to_openai()]


# -- config and trigger -------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        {"max_context_tokens": None, "max_unsummarized_messages": None},
        {"max_context_tokens": 0},
        {"max_unsummarized_messages": 0},
        {"keep_last": -1},
        {"summary_max_tokens": 0},
        {"summary_template": "no placeholder"},
    ],
)
def test_invalid_config_is_rejected(config: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SummarizerConfig(**config)


def test_defaults_follow_pipecat_and_leave_auto_trigger_off() -> None:
    config = SummarizerConfig()
    assert (config.auto_trigger, config.max_context_tokens) == (False, 8000)
    assert (config.max_unsummarized_messages, config.keep_last) == (20, 4)
    assert config.prompt == DEFAULT_SUMMARIZATION_PROMPT


def test_auto_trigger_off_never_fires_but_manual_requests_work() -> None:
    context = LLMContext([SYSTEM, *turns(10)])
    s = summarizer(max_unsummarized_messages=1, max_context_tokens=1)
    assert s.should_summarize(context) is False
    assert s.build_request(context) is not None


def test_message_count_threshold() -> None:
    s = summarizer(auto_trigger=True, max_context_tokens=None, max_unsummarized_messages=6)
    context = LLMContext([SYSTEM, *turns(2), UserMessage.text("u2")])
    assert s.should_summarize(context) is False  # 5 messages after the system prompt
    context.add_message(AssistantMessage.text("a2"))
    assert s.should_summarize(context) is True


def test_token_threshold_does_not_count_the_system_prompt() -> None:
    s = summarizer(auto_trigger=True, max_context_tokens=100, max_unsummarized_messages=None)
    context = LLMContext([SystemMessage("x" * 4000), *turns(2)])
    assert s.should_summarize(context) is False
    context.add_message(UserMessage.text("y" * 400))
    assert s.should_summarize(context) is True


def test_no_trigger_when_nothing_could_be_summarized() -> None:
    s = summarizer(auto_trigger=True, max_context_tokens=1, keep_last=4)
    context = LLMContext([SYSTEM, UserMessage.text("z" * 1000), AssistantMessage.text("ok")])
    assert s.should_summarize(context) is False
    assert s.build_request(context) is None
    assert s.pending is None


# -- what a request covers ---------------------------------------------------------------


def test_request_covers_history_between_the_system_prompt_and_the_last_n() -> None:
    context = LLMContext([SYSTEM, *turns(3)])
    request = summarizer(summary_max_tokens=300).build_request(context)
    assert request is not None
    assert [m.id for m in request.messages] == [m.id for m in context.messages[1:5]]
    assert request.transcript == "User: u0\n\nAssistant: a0\n\nUser: u1\n\nAssistant: a1"
    assert request.llm_messages == [
        {"role": "system", "content": DEFAULT_SUMMARIZATION_PROMPT},
        {"role": "user", "content": f"Conversation history:\n{request.transcript}"},
    ]
    assert request.max_tokens == 300


def test_all_leading_system_messages_are_kept_but_later_ones_are_summarized() -> None:
    second = SystemMessage("Speak French.")
    late = SystemMessage("The user is now in a hurry.")
    context = LLMContext([SYSTEM, second, UserMessage.text("u"), late, *turns(1)])
    request = summarizer().build_request(context)
    assert request is not None
    assert request.transcript == "User: u\n\nSystem: The user is now in a hurry."


def test_the_cut_never_separates_a_tool_call_from_its_results() -> None:
    parallel = AssistantMessage(
        [ToolCallContent(id="c1", name="f", args={}), ToolCallContent(id="c2", name="g", args={})]
    )
    tail = [parallel, ToolMessage(tool_call_id="c1", content="1")]
    tail += [ToolMessage(tool_call_id="c2", content="2"), AssistantMessage.text("done")]
    context = LLMContext([SYSTEM, *turns(1), UserMessage.text("u1"), *tail])
    request = summarizer(keep_last=2).build_request(context)  # a plain cut would fall at c2
    assert request is not None
    assert request.transcript == "User: u0\n\nAssistant: a0\n\nUser: u1"


def test_a_call_still_in_progress_is_kept_with_everything_after_it() -> None:
    running = [call("c1"), ToolMessage(tool_call_id="c1", content=TOOL_IN_PROGRESS)]
    context = LLMContext([SYSTEM, *turns(1), UserMessage.text("u1"), *running, *turns(3)])
    request = summarizer(keep_last=2).build_request(context)
    assert request is not None
    assert request.transcript == "User: u0\n\nAssistant: a0\n\nUser: u1"


def test_a_call_with_no_result_yet_is_kept() -> None:
    context = LLMContext([SYSTEM, *turns(1), call("c1"), *turns(3)])
    request = summarizer(keep_last=2).build_request(context)
    assert request is not None
    assert request.transcript == "User: u0\n\nAssistant: a0"


def test_finished_calls_are_summarized_with_their_results() -> None:
    done = [call("c1"), ToolMessage(tool_call_id="c1", content="18C")]
    context = LLMContext([SYSTEM, UserMessage.text("weather?"), *done, *turns(1)])
    request = summarizer(keep_last=2).build_request(context)
    assert request is not None
    assert request.transcript == (
        "User: weather?\n\n"
        'Assistant called get_weather({"city": "P"}) [c1]\n\n'
        "Tool result [c1]: 18C"
    )


def test_an_async_tool_started_message_completes_the_pair() -> None:
    started = async_tools.build_started_message("c1")
    context = LLMContext([SYSTEM, UserMessage.text("book it"), call("c1"), started, *turns(1)])
    request = summarizer(keep_last=2).build_request(context)
    assert request is not None
    assert [m.id for m in request.messages] == [m.id for m in context.messages[1:4]]


def test_transcript_leaves_out_what_the_llm_never_saw_but_it_is_still_replaced() -> None:
    hidden = [
        CustomMessage(custom_type="ui", data={"x": 1}),
        AssistantMessage([ThinkingContent(content="secret", signature="s"), TextContent("hi")]),
        UserMessage([TextContent("see"), ToolResultContent(id="c0", content="r")]),
    ]
    context = LLMContext([SYSTEM, *hidden, *turns(1)])
    s = summarizer(keep_last=2)
    request = s.build_request(context)
    assert request is not None
    assert request.transcript == "Assistant: hi\n\nTool result [c0]: r\n\nUser: see"
    assert s.apply(context, request, "S").summarized_message_count == 3


# -- applying ---------------------------------------------------------------------------


def test_apply_replaces_older_history_with_the_summary() -> None:
    context = LLMContext([SYSTEM, *turns(3)])
    s = summarizer()
    request = s.build_request(context)
    assert request is not None
    applied = s.apply(context, request, "  Ana wants a table for 4.  ")
    assert context.to_openai() == [
        {"role": "system", "content": "You are Parley."},
        {"role": "user", "content": "Conversation summary: Ana wants a table for 4."},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a2"},
    ]
    assert context.messages[1] is applied.summary_message
    assert applied.summary == "Ana wants a table for 4."
    assert applied.request_id == request.request_id
    assert (applied.original_message_count, applied.new_message_count) == (7, 4)
    assert (applied.summarized_message_count, applied.preserved_message_count) == (4, 3)
    assert s.pending is None


def test_the_summary_uses_the_configured_template() -> None:
    context = LLMContext([SYSTEM, *turns(3)])
    s = summarizer(summary_template="Earlier: {summary}")
    request = s.build_request(context)
    assert request is not None
    s.apply(context, request, "S")
    assert texts(context)[1] == "Earlier: S"


def test_messages_added_while_summarizing_are_kept() -> None:
    context = LLMContext([SYSTEM, *turns(3)])
    s = summarizer()
    request = s.build_request(context)
    assert request is not None
    context.add_message(UserMessage.text("u3"))
    s.apply(context, request, "S")
    assert texts(context) == ["You are Parley.", "Conversation summary: S", "u2", "a2", "u3"]


def test_editing_the_system_prompt_while_summarizing_is_fine() -> None:
    context = LLMContext([SYSTEM, *turns(3)])
    s = summarizer()
    request = s.build_request(context)
    assert request is not None
    context.transform_messages(lambda ms: [SystemMessage("New prompt."), *ms[1:]])
    s.apply(context, request, "S")
    assert texts(context)[:2] == ["New prompt.", "Conversation summary: S"]


def test_a_previous_summary_is_folded_into_the_next_one() -> None:
    context = LLMContext([SYSTEM, *turns(3)])
    s = summarizer()
    first = s.build_request(context)
    assert first is not None
    s.apply(context, first, "S1")
    context.add_messages(turns(2))
    second = s.build_request(context)
    assert second is not None
    assert second.transcript.startswith("Summary of the conversation before this: S1\n\nUser: u2")
    s.apply(context, second, "S2")
    assert texts(context) == ["You are Parley.", "Conversation summary: S2", "u1", "a1"]


def test_a_lone_previous_summary_is_not_summarized_again() -> None:
    s = summarizer(auto_trigger=True, max_context_tokens=1)
    summary = CompactionSummaryMessage(summary="S")
    context = LLMContext([SYSTEM, summary, *turns(1)])
    assert s.should_summarize(context) is False
    assert s.build_request(context) is None


def test_the_message_count_restarts_after_a_summary() -> None:
    s = summarizer(auto_trigger=True, max_context_tokens=None, max_unsummarized_messages=4)
    context = LLMContext([SYSTEM, *turns(3)])
    assert s.should_summarize(context) is True
    request = s.build_request(context)
    assert request is not None
    s.apply(context, request, "S")
    assert s.should_summarize(context) is False  # 2 messages since the summary
    context.add_messages(turns(1))
    assert s.should_summarize(context) is True


def test_a_pending_request_holds_off_the_auto_trigger() -> None:
    s = summarizer(auto_trigger=True, max_unsummarized_messages=1)
    context = LLMContext([SYSTEM, *turns(3)])
    request = s.build_request(context)
    assert s.pending is request
    assert s.should_summarize(context) is False
    s.abandon()
    assert s.should_summarize(context) is True


def test_an_empty_summary_is_rejected_and_nothing_changes() -> None:
    context = LLMContext([SYSTEM, *turns(3)])
    before = context.to_openai()
    s = summarizer()
    request = s.build_request(context)
    assert request is not None
    with pytest.raises(ValueError):
        s.apply(context, request, "  \n")
    assert context.to_openai() == before
    assert s.pending is None


# -- stale requests ----------------------------------------------------------------------


def _stale(context: LLMContext, s: ContextSummarizer, request: Any) -> None:
    before = context.to_openai()
    with pytest.raises(StaleSummaryError):
        s.apply(context, request, "S")
    assert context.to_openai() == before
    assert s.pending is None


def test_stale_when_a_summarized_message_was_edited() -> None:
    context = LLMContext([SYSTEM, *turns(3)])
    s = summarizer()
    request = s.build_request(context)
    message = context.messages[2]
    assert isinstance(message, AssistantMessage)
    message.contents.append(TextContent(" (corrected)"))
    _stale(context, s, request)


def test_stale_when_the_history_was_replaced() -> None:
    context = LLMContext([SYSTEM, *turns(3)])
    s = summarizer()
    request = s.build_request(context)
    context.set_messages([SYSTEM, *turns(3)])  # same text, different messages
    _stale(context, s, request)


def test_stale_when_fewer_than_keep_last_messages_would_remain() -> None:
    context = LLMContext([SYSTEM, *turns(3)])
    s = summarizer()
    request = s.build_request(context)
    context.transform_messages(lambda ms: ms[:-1])
    _stale(context, s, request)


def test_stale_when_a_kept_tool_result_answers_a_summarized_call() -> None:
    done = [call("c1"), ToolMessage(tool_call_id="c1", content="18C")]
    context = LLMContext([SYSTEM, UserMessage.text("weather?"), *done, *turns(1)])
    s = summarizer()
    request = s.build_request(context)
    context.add_message(ToolMessage(tool_call_id="c1", content="late duplicate"))
    _stale(context, s, request)


def test_a_newer_request_supersedes_an_older_one() -> None:
    context = LLMContext([SYSTEM, *turns(3)])
    s = summarizer()
    old = s.build_request(context)
    new = s.build_request(context)
    assert new is not None and old is not None and new.request_id != old.request_id
    with pytest.raises(StaleSummaryError):
        s.apply(context, old, "S")
    s.build_request(context)  # the failed apply cleared the pending request
    assert s.pending is not None


def test_an_abandoned_or_applied_request_cannot_be_applied() -> None:
    context = LLMContext([SYSTEM, *turns(3)])
    s = summarizer()
    request = s.build_request(context)
    s.abandon()
    _stale(context, s, request)
    request = s.build_request(context)
    assert request is not None
    s.apply(context, request, "S")
    _stale(context, s, request)
