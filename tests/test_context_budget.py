"""The context's token budget: the limit (oldest messages dropped, tool pairs kept whole),
the summary trigger at 3/4 of it, the summary's own max_tokens, and summaries on request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from pipeline.context.budget import (
    CUT_MARK,
    ContextBudget,
    ContextBudgetParams,
    history_tokens,
    trim_to_budget,
)
from pipeline.context.llm_context import LLMContext
from pipeline.events import Event, SummaryAppliedEvent
from pipeline.messages import (
    AssistantMessage,
    CompactionSummaryMessage,
    Message,
    SystemMessage,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from pipeline.services.llm import LLMChunk, TextDelta

SYSTEM = SystemMessage("You are Parley.")
WORDS = "the weather was lovely and the train was on time " * 3  # ~38 tokens with framing


def turns(n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        out += [UserMessage.text(f"u{i} {WORDS}"), AssistantMessage.text(f"a{i} {WORDS}")]
    return out


class CompletingLLM:
    """The provider edge: a ``complete`` call (as OpenAILLM has), recorded."""

    supports_tools = False

    def __init__(self, summary: str = "They talked about the weather.") -> None:
        self.summary = summary
        self.calls: list[tuple[list[dict[str, Any]], int]] = []

    async def complete(self, messages: list[dict[str, Any]], max_tokens: int = 1024) -> str:
        self.calls.append((messages, max_tokens))
        return self.summary

    async def stream(self, messages: Any, tools: Any = None, tool_choice: Any = None) -> Any:
        raise AssertionError("the summary must use complete() with its max_tokens")
        yield  # pragma: no cover


class StreamingLLM:
    """An LLM with only ``stream`` (as the embedded one)."""

    supports_tools = False

    async def stream(
        self, messages: Any, tools: Any = None, tool_choice: Any = None
    ) -> AsyncIterator[LLMChunk]:
        for part in ("Weather ", "talk."):
            yield TextDelta(part)


# -- the limit ------------------------------------------------------------------------------


def test_under_the_budget_nothing_is_dropped() -> None:
    context = LLMContext([SYSTEM, *turns(2)])
    assert trim_to_budget(context, 10_000) == 0 and trim_to_budget(context, 0) == 0
    assert len(context.messages) == 5


def test_the_oldest_messages_make_room() -> None:
    context = LLMContext([SYSTEM, *turns(6)])
    budget = history_tokens(context.messages) // 2
    dropped = trim_to_budget(context, budget)
    assert dropped > 0
    assert history_tokens(context.messages) <= budget
    assert context.messages[0] is SYSTEM
    assert context.messages[-1].text_content().startswith("a5"), "the newest stay"


def test_a_tool_result_is_never_kept_without_its_call() -> None:
    call = AssistantMessage([ToolCallContent(id="c1", name="lookup", args={"q": WORDS})])
    result = ToolMessage("c1", WORDS * 2)
    messages = [SYSTEM, UserMessage.text(WORDS), call, result, *turns(1)]
    for budget in range(20, history_tokens(messages), 10):
        context = LLMContext(messages)
        trim_to_budget(context, budget)
        kept = context.messages
        for i, message in enumerate(kept):
            if isinstance(message, ToolMessage):
                assert kept[i - 1] is call, f"budget {budget}: a result without its call"


def test_the_newest_message_stays_even_alone_over_the_budget() -> None:
    context = LLMContext([SYSTEM, *turns(2), UserMessage.text(WORDS * 10)])
    trim_to_budget(context, 10)
    assert [type(m) for m in context.messages] == [SystemMessage, UserMessage]


def test_a_newest_tool_result_keeps_its_call() -> None:
    call = AssistantMessage([ToolCallContent(id="c9", name="lookup", args={})])
    context = LLMContext([SYSTEM, *turns(3), call, ToolMessage("c9", WORDS * 10)])
    trim_to_budget(context, 10)
    assert context.messages[1:] == [call, context.messages[-1]]
    assert isinstance(context.messages[-1], ToolMessage)


def test_a_tool_result_over_the_budget_is_cut_and_leaves_room_for_the_question() -> None:
    question = UserMessage.text("Fetch the price list, please.")
    call = AssistantMessage([ToolCallContent(id="c9", name="fetch", args={})])
    result = ToolMessage("c9", "x" * 100_000)
    earlier = turns(3)
    context = LLMContext([SYSTEM, *earlier, question, call, result])
    assert trim_to_budget(context, 1000) == 0, "cut, nothing dropped"
    assert context.messages == [SYSTEM, *earlier, question, call, result]
    assert history_tokens(context.messages) <= 1000
    assert result.content.startswith("x" * 1900) and result.content.endswith(CUT_MARK)
    assert len(result.content) <= 500 * 4, "at most half the budget"


def test_a_newest_call_alone_over_the_budget_is_cut_to_fit() -> None:
    call = AssistantMessage([ToolCallContent(id="c9", name="fetch", args={})])
    result = ToolMessage("c9", "x" * 100_000)
    context = LLMContext([SYSTEM, UserMessage.text(WORDS * 30), call, result])
    trim_to_budget(context, 1000)
    assert context.messages[1:] == [call, result], "the pair stays, cut in place"
    assert history_tokens(context.messages) <= 1000
    assert result.content.endswith(CUT_MARK)


def test_the_largest_newest_results_are_cut_first() -> None:
    calls = [ToolCallContent(id=f"c{i}", name="fetch", args={}) for i in range(4)]
    texts = ("ok", "y" * 12_000, "z" * 14_000, "w" * 13_600)  # 3,000 to 3,500 tokens each
    results = [ToolResultContent(id=f"c{i}", content=t) for i, t in enumerate(texts)]
    message = ToolMessage(contents=results)
    context = LLMContext([SYSTEM, UserMessage.text(WORDS), AssistantMessage([*calls]), message])
    trim_to_budget(context, 8000)  # each under half the budget, together over it
    assert history_tokens(context.messages) <= 8000
    assert [r.content for r in results if not r.content.endswith(CUT_MARK)] == [
        texts[0],
        texts[1],
        texts[3],
    ]
    assert len(results[2].content) < len(texts[2])
    trim_to_budget(context, 2000)
    assert history_tokens(context.messages) <= 2000
    assert results[0].content == "ok"
    assert all(r.content.endswith(CUT_MARK) for r in results[1:])


# -- summaries ------------------------------------------------------------------------------


def budget_for(
    context: LLMContext, llm: Any, max_tokens: int, **params: Any
) -> tuple[ContextBudget, list[Event]]:
    events: list[Event] = []
    params = ContextBudgetParams(max_tokens=max_tokens, **params)
    return ContextBudget(context, llm, events.append, params), events


async def settle(budget: ContextBudget) -> None:
    for _ in range(5):
        await asyncio.sleep(0)
    await budget.close()


async def test_summary_starts_at_three_quarters_of_the_budget() -> None:
    context = LLMContext([SYSTEM, *turns(4)])
    tokens = history_tokens(context.messages)
    llm = CompletingLLM()
    budget, events = budget_for(context, llm, int(tokens / 0.75) + 40, summary_max_tokens=77)
    budget.answer_ended()
    await settle(budget)
    assert not llm.calls, "below 3/4 of the budget"

    budget, events = budget_for(context, llm, int(tokens / 0.75) - 10, summary_max_tokens=77)
    budget.answer_ended()
    await asyncio.sleep(0.01)
    assert len(llm.calls) == 1 and llm.calls[0][1] == 77, "the summary's own max_tokens"
    assert isinstance(context.messages[1], CompactionSummaryMessage)
    assert [type(e) for e in events] == [SummaryAppliedEvent]
    assert len(context.messages) == 1 + 1 + 4, "system, summary, the last four"
    assert budget.info()["summaries"] == 1


async def test_off_means_no_automatic_summary_but_the_limit_holds() -> None:
    context = LLMContext([SYSTEM, *turns(6)])
    llm = CompletingLLM()
    budget, _ = budget_for(context, llm, 200, summarize=False)
    budget.before_llm_run()
    await settle(budget)
    assert not llm.calls
    assert history_tokens(context.messages) <= 200
    assert budget.info()["dropped_messages"] > 0


async def test_summary_on_request_whatever_the_budget() -> None:
    context = LLMContext([SYSTEM, *turns(3)])
    budget, _ = budget_for(context, StreamingLLM(), 0)
    outcome = await budget.summarize_now()
    assert outcome["status"] == "applied" and outcome["summarized_messages"] == 2
    assert outcome["tokens_after"] < outcome["tokens_before"]
    assert context.to_openai()[1]["content"] == "Conversation summary: Weather talk."
    again = await budget.summarize_now()
    assert again["status"] in ("applied", "nothing-to-summarize")
    assert (await budget.summarize_now())["status"] == "nothing-to-summarize"


async def test_a_failed_summary_is_reported_and_tried_again() -> None:
    class FailingLLM(CompletingLLM):
        async def complete(self, messages: Any, max_tokens: int = 1024) -> str:
            self.calls.append((messages, max_tokens))
            raise ConnectionError("provider down")

    context = LLMContext([SYSTEM, *turns(4)])
    llm = FailingLLM()
    budget, events = budget_for(context, llm, 100)
    outcome = await budget.summarize_now()
    assert outcome == {"status": "failed", "error": "provider down"}
    assert not events and budget.summarizer.pending is None
    budget.answer_ended()  # over 3/4 of 100: the next answer tries again
    await asyncio.sleep(0.01)
    assert len(llm.calls) == 2 and budget.info()["summary_failures"] == 2


async def test_a_summary_of_a_context_that_moved_on_is_dropped() -> None:
    gate = asyncio.Event()

    class SlowLLM(CompletingLLM):
        async def complete(self, messages: Any, max_tokens: int = 1024) -> str:
            await gate.wait()
            return "late"

    context = LLMContext([SYSTEM, *turns(4)])
    budget, events = budget_for(context, SlowLLM(), 100_000)
    waiting = asyncio.create_task(budget.summarize_now())
    await asyncio.sleep(0)
    trim_to_budget(context, 100)  # the limit dropped what was being summarized
    gate.set()
    assert (await waiting)["status"] == "stale"
    assert not events
