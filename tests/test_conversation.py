"""A whole conversation in one process: a bot turn, then a barge-in that cancels it.

The model edge is scripted (an LLM that streams tokens, a TTS that makes tones); the rest
is real: turn-taking, aggregators, the bot-turn task and the paced outbound track, read
by a task the way aiortc's sender reads it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from pipeline.context.llm_context import LLMContext
from pipeline.context.summarizer import ContextSummarizer, SummarizerConfig
from pipeline.conversation import Conversation
from pipeline.conversation_params import ConversationParams
from pipeline.events import (
    BotStartedSpeaking,
    BotStoppedSpeaking,
    BotText,
    BotTextStarted,
    Event,
    Interruption,
    LLMResponseEnded,
    ServiceError,
    SpeechStarted,
    SpeechStopped,
    SummaryAppliedEvent,
    Transcription,
)
from pipeline.messages import AssistantMessage
from pipeline.reply.turn_completion import TurnCompletionConfig
from pipeline.services.llm import LLMChunk, TextDelta
from server.media.outbound_track import PacedAudioTrack
from testkit.conversation_call import Running

ANSWER = "Sure. The weather is sunny and warm today, with a light breeze. Enjoy the day."


class ScriptedLLM:
    """Streams a fixed answer token by token; remembers what it was asked and if closed."""

    supports_tools = False

    def __init__(self, answer: str = ANSWER, fail: bool = False) -> None:
        self.answer = answer
        self.fail = fail
        self.requests: list[list[dict[str, Any]]] = []
        self.closed = 0

    async def stream(
        self, messages: list[dict[str, Any]], tools: Any = None, tool_choice: Any = None
    ) -> AsyncIterator[LLMChunk]:
        self.requests.append(messages)
        try:
            if self.fail:
                raise ConnectionError("endpoint down")
            for word in self.answer.split(" "):
                await asyncio.sleep(0.005)
                yield TextDelta(word + " ")
        finally:
            self.closed += 1


class ToneTTS:
    """0.3 s of tone per sentence, in two chunks."""

    sample_rate = 24000

    def __init__(self) -> None:
        self.sentences: list[str] = []
        self.closed = 0

    async def synthesize(self, text: str) -> AsyncIterator[np.ndarray]:
        self.sentences.append(text)
        t = np.arange(int(0.15 * self.sample_rate)) / self.sample_rate
        chunk = (6000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
        try:
            for _ in range(2):
                await asyncio.sleep(0.01)
                yield chunk
        finally:
            self.closed += 1


class Harness(Running):
    def __init__(self, llm: ScriptedLLM) -> None:
        self.llm = llm
        self.tts = ToneTTS()
        self.track = PacedAudioTrack()
        self.context = LLMContext([{"role": "system", "content": "Be brief."}])
        # Barge-in cancels at once here; pausing first is tested in test_barge_in.py.
        params = ConversationParams(pause_on_interruption=False)
        self.conv = Conversation(self.context, llm, self.tts, self.track, params)
        self.track.listener = self.conv
        self.seen: list[Event] = []
        for kind in (BotStartedSpeaking, BotStoppedSpeaking, Interruption, LLMResponseEnded,
                     ServiceError):  # fmt: skip
            self.conv.events.on(kind, self.seen.append)


async def test_an_answer_is_spoken_whole_and_recorded() -> None:
    async with Harness(ScriptedLLM()) as h:
        h.conv.user.add_text("What is the weather?")
        await h.until(BotStoppedSpeaking)
        await asyncio.sleep(0.05)
    assert h.tts.sentences == [
        "Sure.",
        "The weather is sunny and warm today, with a light breeze.",
        "Enjoy the day.",
    ]
    last = h.context.messages[-1]
    assert isinstance(last, AssistantMessage) and not last.interrupted
    assert last.text_content() == ANSWER
    assert h.llm.requests[0][-1] == {"role": "user", "content": "What is the weather?"}


async def test_barge_in_cancels_the_turn_and_keeps_only_what_was_spoken() -> None:
    async with Harness(ScriptedLLM()) as h:
        for kind in (BotText, BotTextStarted):
            h.conv.events.on(kind, h.seen.append)
        h.conv.user.add_text("What is the weather?")
        # "Sure." has played; the next sentence is under way.
        await h.until(BotText)
        await h.until(BotTextStarted, count=2)
        now = time.monotonic()
        h.conv.feed(SpeechStarted(now))  # the VAD hears the user: a turn, with barge-in
        # At once, in the same step: audio gone, the turn cancelled, the message closed.
        assert h.track.queued_seconds == 0 and not h.track.playing
        assert any(isinstance(e, Interruption) for e in h.seen)
        assert h.seen.index(next(e for e in h.seen if isinstance(e, BotStoppedSpeaking))) < (
            h.seen.index(next(e for e in h.seen if isinstance(e, Interruption)))
        )
        await asyncio.sleep(0.05)
        assert h.llm.closed == 1 and h.tts.closed >= 1, "LLM and TTS streams were closed"
        spoken = h.context.messages[-1]
        assert isinstance(spoken, AssistantMessage) and spoken.interrupted
        text = spoken.text_content()
        assert text.startswith("Sure.") and len(text) < len(ANSWER)
        assert ANSWER.startswith(text)

        # The user's turn goes on and ends; the next answer sees the interrupted one.
        h.conv.feed(Transcription("Wait, what about tomorrow?", now + 0.5))
        h.conv.feed(SpeechStopped(now + 0.6))
        await h.until(LLMResponseEnded, count=2, within=5)
        wire = h.llm.requests[1]
        assert wire[-2] == {"role": "assistant", "content": text}
        assert wire[-1] == {"role": "user", "content": "Wait, what about tomorrow?"}


async def test_text_sent_while_the_interrupted_turn_unwinds_is_answered() -> None:
    async with Harness(ScriptedLLM()) as h:
        h.conv.user.add_text("What is the weather?")
        await h.until(BotStartedSpeaking)
        # send-text barging in: interrupt and ask again in one step, before the cancelled
        # turn's task has finished unwinding.
        h.conv.interrupt()
        h.conv.user.add_text("And tomorrow?", run_llm=False)
        h.conv.run_llm()
        await h.until(LLMResponseEnded, within=5)  # the cancelled turn ends none
        assert h.llm.requests[1][-1] == {"role": "user", "content": "And tomorrow?"}


async def test_a_failing_llm_reports_an_error_and_the_next_turn_works() -> None:
    llm = ScriptedLLM(fail=True)
    async with Harness(llm) as h:
        h.conv.user.add_text("Hello?")
        await h.until(ServiceError)
        error = next(e for e in h.seen if isinstance(e, ServiceError))
        assert "endpoint down" in error.error and not error.fatal
        llm.fail = False
        h.conv.user.add_text("Hello again?")
        await h.until(BotStoppedSpeaking)
    assert h.context.messages[-1].text_content() == ANSWER


async def test_incomplete_turn_is_not_answered_and_the_user_is_nudged_later() -> None:
    llm = ScriptedLLM(answer="○")
    async with Harness(llm) as h:
        h.conv.filter_incomplete_user_turns = True
        h.conv.turn_completion = TurnCompletionConfig(incomplete_short_timeout=0.2)
        h.conv.user.add_text("I want to book a flight to")
        await h.until(LLMResponseEnded)
        assert "✓" in llm.requests[0][0]["content"], "the instructions reach the LLM"
        await asyncio.sleep(0.05)
        # As the reference: the marker alone is the context's entry for the turn.
        said = [m for m in h.context.messages if isinstance(m, AssistantMessage)]
        assert [m.text_content() for m in said] == ["○"]
        assert h.tts.sentences == [], "nothing is spoken"
        llm.answer = "✓ Where would you like to fly?"
        await h.until(LLMResponseEnded, count=2, within=2)
        assert llm.requests[1][-1] == {
            "role": "system",
            "content": h.conv.turn_completion.incomplete_short_prompt,
        }
        await h.until(BotStoppedSpeaking)
    assert h.context.messages[-1].text_content() == "✓ Where would you like to fly?"


async def test_the_nudge_is_cancelled_when_the_user_goes_on() -> None:
    llm = ScriptedLLM(answer="○")
    async with Harness(llm) as h:
        h.conv.filter_incomplete_user_turns = True
        h.conv.turn_completion = TurnCompletionConfig(incomplete_short_timeout=0.2)
        h.conv.user.add_text("I want to book a flight to")
        await h.until(LLMResponseEnded)
        h.conv.feed(SpeechStarted(time.monotonic()))
        await asyncio.sleep(0.4)
        assert len(llm.requests) == 1


async def test_older_history_is_summarized_by_the_configured_llm() -> None:
    llm = ScriptedLLM(answer="Fine.")
    async with Harness(llm) as h:
        config = SummarizerConfig(auto_trigger=True, max_unsummarized_messages=4, keep_last=2)
        h.conv.assistant.summarizer = ContextSummarizer(config)
        applied: list[SummaryAppliedEvent] = []
        h.conv.events.on(SummaryAppliedEvent, applied.append)
        for n in range(2):
            h.conv.user.add_text(f"Question {n}?")
            await h.until(BotStoppedSpeaking, count=n + 1)
            await asyncio.sleep(0.05)
        deadline = time.monotonic() + 3
        while not applied and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    assert applied, "the summary was applied"
    summary_request = next(r for r in llm.requests if "Conversation history" in str(r))
    assert "Question 0?" in summary_request[-1]["content"]
    wire = h.context.to_openai()
    assert wire[1] == {"role": "user", "content": "Conversation summary: Fine."}
    assert [m["content"] for m in wire[2:]] == ["Question 1?", "Fine."]
