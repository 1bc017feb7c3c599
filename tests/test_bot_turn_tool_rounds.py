"""The bound on tool-call rounds per user turn: after ``MAX_TOOL_ROUNDS`` rounds the LLM
is asked with ``tool_choice="none"`` and must answer (a small model may otherwise call
the same tool after every result for the rest of the call)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pipeline.context.llm_context import LLMContext
from pipeline.reply.bot_turn import MAX_TOOL_ROUNDS, BotTurn, tool_rounds
from pipeline.services.llm import LLMChunk, TextDelta

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


class RecordingLLM:
    """An LLM that answers "Fine." and records the tool choice of each call."""

    supports_tools = True
    model = "recording"

    def __init__(self) -> None:
        self.choices: list[Any] = []

    async def stream(
        self, messages: list[dict[str, Any]], tools: Any = None, tool_choice: Any = None
    ) -> AsyncIterator[LLMChunk]:
        self.choices.append(tool_choice)
        yield TextDelta("Fine.")


def rounds(count: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "Weather?"}]
    for n in range(count):
        call = {"id": f"c{n}", "type": "function",
                "function": {"name": "get_weather", "arguments": "{}"}}  # fmt: skip
        out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        out.append({"role": "tool", "tool_call_id": f"c{n}", "content": "sunny"})
    return out


def test_rounds_are_counted_since_the_last_user_message() -> None:
    assert tool_rounds(rounds(0)) == 0
    assert tool_rounds(rounds(3)) == 3
    assert tool_rounds([*rounds(3), {"role": "user", "content": "And Rome?"}]) == 0


async def run_turn(messages: list[dict[str, Any]]) -> Any:
    llm = RecordingLLM()
    context = LLMContext(messages, tools=TOOLS, tool_choice="auto")
    await BotTurn(context, llm, lambda _event: None).run()
    return llm.choices[-1]


async def test_the_llm_must_answer_after_the_last_allowed_round() -> None:
    assert await run_turn(rounds(MAX_TOOL_ROUNDS - 1)) == "auto"
    assert await run_turn(rounds(MAX_TOOL_ROUNDS)) == "none"
