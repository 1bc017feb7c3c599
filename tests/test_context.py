"""The LLM context: messages in and out, tools, usage, tool results, size estimate."""

from __future__ import annotations

import pytest

from pipeline.context.llm_context import (
    TOOL_CANCELLED,
    TOOL_IN_PROGRESS,
    LLMContext,
    estimate_tokens,
)
from pipeline.messages import (
    AssistantMessage,
    AudioContent,
    CompactionSummaryMessage,
    CustomMessage,
    ImageContent,
    Message,
    SystemMessage,
    ThinkingContent,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    Usage,
    UsageCost,
    UserMessage,
)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def call_context() -> LLMContext:
    """A context with one tool call still running."""
    return LLMContext(
        [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": TOOL_IN_PROGRESS},
        ]
    )


def test_plain_dicts_are_stored_as_typed_messages() -> None:
    context = LLMContext()
    stored = context.add_message({"role": "user", "content": "hi"})
    assert isinstance(stored, UserMessage)
    assert context.messages == [stored]
    assert context.to_openai() == [{"role": "user", "content": "hi"}]


def test_typed_and_dict_messages_mix() -> None:
    context = LLMContext([SystemMessage("sys")])
    added = context.add_messages([UserMessage.text("a"), {"role": "assistant", "content": "b"}])
    assert [type(m).__name__ for m in added] == ["UserMessage", "AssistantMessage"]
    assert context.to_openai() == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]


def test_returned_message_lists_are_copies() -> None:
    context = LLMContext([SystemMessage("sys")])
    context.get_messages().append(UserMessage.text("sneaky"))
    context.messages.clear()
    assert len(context.get_messages()) == 1


def test_set_messages_replaces_the_conversation() -> None:
    context = LLMContext([SystemMessage("old")])
    context.set_messages([{"role": "system", "content": "new"}])
    assert context.to_openai() == [{"role": "system", "content": "new"}]


def test_transform_messages_applies_a_function() -> None:
    context = LLMContext([SystemMessage("sys"), UserMessage.text("a"), UserMessage.text("b")])

    def keep_last_user(messages: list[Message]) -> list[Message | dict[str, str]]:
        return [messages[0], messages[-1], {"role": "assistant", "content": "ok"}]

    context.transform_messages(keep_last_user)
    assert context.to_openai() == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "ok"},
    ]


def test_non_messages_are_rejected() -> None:
    with pytest.raises(TypeError):
        LLMContext().add_message("hello")  # type: ignore[arg-type]


def test_tools_are_stored_and_an_empty_list_means_none() -> None:
    context = LLMContext(tools=[WEATHER_TOOL])
    assert context.tools == [WEATHER_TOOL]
    context.set_tools([])
    assert context.tools is None
    context.set_tools([WEATHER_TOOL])
    context.set_tools(None)
    assert context.tools is None


@pytest.mark.parametrize(
    "choice", ["none", "auto", "required", {"type": "function", "function": {"name": "f"}}, None]
)
def test_tool_choice_accepts_modes_and_a_function_dict(choice: object) -> None:
    context = LLMContext()
    context.set_tool_choice(choice)  # type: ignore[arg-type]
    assert context.tool_choice == choice


def test_tool_choice_rejects_unknown_modes() -> None:
    with pytest.raises(ValueError):
        LLMContext(tool_choice="always")  # type: ignore[arg-type]


def test_usage_accumulates_over_the_session() -> None:
    context = LLMContext()
    assert context.usage == Usage()
    context.add_usage(Usage(100, 20, cost=UsageCost(total=0.5)))
    total = context.add_usage(Usage(50, 10, cache_read_tokens=40, cost=UsageCost(total=0.25)))
    assert total == context.usage == Usage(150, 30, 40, 0, UsageCost(total=0.75))


def test_set_tool_result_replaces_the_in_progress_placeholder_in_place() -> None:
    context = call_context()
    placeholder = context.find_tool_message("call_1")
    assert placeholder is not None
    assert context.set_tool_result("call_1", '{"temp": 18}') is True
    assert context.messages[3] is placeholder and placeholder.content == '{"temp": 18}'
    assert context.to_openai()[3] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"temp": 18}',
    }


def test_set_tool_result_marks_a_cancelled_call() -> None:
    context = call_context()
    context.set_tool_result("call_1", TOOL_CANCELLED)
    assert context.to_openai()[-1]["content"] == "CANCELLED"


def test_set_tool_result_for_an_unknown_call_changes_nothing() -> None:
    context = call_context()
    before = context.to_openai()
    assert context.set_tool_result("call_404", "x") is False
    assert context.to_openai() == before


def test_find_tool_message() -> None:
    context = call_context()
    found = context.find_tool_message("call_1")
    assert isinstance(found, ToolMessage) and found.content == "IN_PROGRESS"
    assert context.find_tool_message("nope") is None


def test_token_estimate_counts_text_framing_and_tool_calls() -> None:
    call = ToolCallContent(id="c1", name="get_weather", args={"city": "Paris"})
    context = LLMContext(
        [
            SystemMessage("a" * 40),  # 10 + 40/4
            UserMessage.text("hello"),  # 10 + ceil(5/4)
            AssistantMessage([call]),  # 10 + ceil(len('get_weather{"city": "Paris"}')/4)
            ToolMessage(tool_call_id="c1", content="sunny"),  # 10 + ceil(5/4)
        ]
    )
    assert context.estimate_tokens() == 20 + 12 + 17 + 12


def test_token_estimate_gives_media_a_flat_cost() -> None:
    message = UserMessage([ImageContent([b"a", b"b"]), AudioContent([b"c"])])
    assert estimate_tokens([message]) == 10 + 2 * 500 + 500


def test_token_estimate_ignores_what_is_not_sent() -> None:
    messages = [
        AssistantMessage([ThinkingContent(content="x" * 400, signature="s")]),
        CustomMessage(custom_type="note", data={"text": "y" * 400}),
    ]
    assert estimate_tokens(messages) == 0


def test_token_estimate_counts_the_rendered_compaction_summary() -> None:
    summary = CompactionSummaryMessage(summary="abc")  # "Conversation summary: abc", 25 chars
    assert estimate_tokens([summary]) == 10 + 7


def test_token_estimate_counts_tool_results_riding_in_a_user_message() -> None:
    message = UserMessage([ToolResultContent(id="c", content="12345678")])
    assert estimate_tokens([message]) == 10 + 2
