"""Taking back a turn that ended too early, and the start of its answer."""

from __future__ import annotations

from pipeline.context.llm_context import LLMContext
from pipeline.messages import AssistantMessage, TextContent
from pipeline.turns.merge import take_back_turn


def conversation() -> tuple[LLMContext, object]:
    context = LLMContext([{"role": "system", "content": "Be brief."}])
    context.add_message({"role": "user", "content": "Hi."})
    context.add_message({"role": "assistant", "content": "Hello!"})
    user = context.add_message({"role": "user", "content": "I was wondering about something"})
    return context, user


def test_the_turn_and_its_partial_answer_come_out_the_notes_stay() -> None:
    context, user = conversation()
    context.add_message({"role": "system", "content": "<ui_state>...</ui_state>"})
    partial = [TextContent(content="Sure, what")]
    context.add_message(AssistantMessage(contents=partial, interrupted=True))
    assert take_back_turn(context, user) == ("I was wondering about something", "Sure, what")
    assert [m.role.value for m in context.messages] == ["system", "user", "assistant", "system"]
    assert context.messages[-1].content == "<ui_state>...</ui_state>"  # type: ignore[union-attr]


def test_a_turn_answered_with_nothing_yet_comes_out_alone() -> None:
    context, user = conversation()
    assert take_back_turn(context, user) == ("I was wondering about something", "")
    assert len(context.messages) == 3


def test_an_answer_that_called_a_tool_is_not_taken_back() -> None:
    context, user = conversation()
    call = {"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}
    context.add_message({"role": "assistant", "tool_calls": [call]})
    context.add_message({"role": "tool", "tool_call_id": "c1", "content": "IN_PROGRESS"})
    before = context.to_openai()
    assert take_back_turn(context, user) is None
    assert context.to_openai() == before


def test_a_message_no_longer_in_the_context_is_left_alone() -> None:
    context, user = conversation()
    context.set_messages(context.messages[:1])
    assert take_back_turn(context, user) is None
    assert len(context.messages) == 1
