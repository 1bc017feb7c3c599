"""The end of the user's turn in a whole conversation: preemptive replies held, released
or dropped, and a turn that ended too early merged with what the user said next.

Real turn-taking (the adaptive rule), aggregators, bot turns and the paced outbound
track; the LLM and TTS are the OpenAI-compatible services talking to the stub on
127.0.0.1. VAD events, transcripts and end-of-turn scores are fed as the session feeds
them, on the real clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pipeline.context import LLMContext
from pipeline.conversation import Conversation
from pipeline.frames import (
    BotStartedSpeaking,
    BotStoppedSpeaking,
    Event,
    Interruption,
    LLMResponseStarted,
    PreemptiveReplyEnded,
    SpeechOnset,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    TurnEndScore,
    UserTranscript,
    UserTurnEndPredicted,
    UserTurnMerged,
    UserTurnStopped,
)
from pipeline.messages import AssistantMessage, UserMessage
from pipeline.services.openai_llm import OpenAILLM
from pipeline.services.openai_tts import OpenAITTS
from pipeline.turns import UserTurnParams
from pipeline.turns.stop_adaptive import AdaptiveStopParams
from server.webrtc import PacedAudioTrack
from tests.openai_stub import OpenAIStub

CHAT = "/v1/chat/completions"
# Short waits so the tests are quick: a statement the model calls done ends 0.5 s after
# its speech; a reply starts (held) 0.3 s before that.
PARAMS = UserTurnParams(
    turn_end="adaptive", adaptive=AdaptiveStopParams(statement_wait=(0.5, 1.0), lead=0.3)
)


class Call:
    """One conversation on the real track, with the stub behind its LLM and TTS."""

    def __init__(self, stub: OpenAIStub, merge_window: float = 1.0) -> None:
        self.stub = stub
        self.llm = OpenAILLM("stub-llm", base_url=stub.base_url, api_key=stub.api_key)
        self.tts = OpenAITTS("stub-tts", "alloy", base_url=stub.base_url, api_key=stub.api_key)
        self.track = PacedAudioTrack()
        self.context = LLMContext([{"role": "system", "content": "Be brief."}])
        self.conv = Conversation(
            self.context, self.llm, self.tts, self.track, PARAMS, merge_window=merge_window
        )
        # A reply takes 0.3 s to its first audio, measured or not.
        fixed_lead = lambda default, recent=20: 0.3  # noqa: E731
        self.conv.metrics.reply_latency = fixed_lead  # type: ignore[method-assign]
        self.track.listener = self.conv
        self.seen: list[Event] = []
        for kind in (UserTurnEndPredicted, UserTurnStopped, LLMResponseStarted,
                     BotStartedSpeaking, BotStoppedSpeaking, Interruption,
                     PreemptiveReplyEnded, UserTurnMerged, UserTranscript):  # fmt: skip
            self.conv.events.on(kind, self.seen.append)
        self._sender: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Call:
        self.conv.start()
        self._sender = asyncio.create_task(self._send())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._sender is not None
        self._sender.cancel()
        await asyncio.gather(self._sender, return_exceptions=True)
        await self.conv.close()
        for service in (self.llm, self.tts):
            await service.aclose()

    async def _send(self) -> None:
        while True:
            await self.track.recv()

    def say(self, text: str, seconds: float = 0.6, probability: float = 0.95) -> float:
        """A stretch of speech that ended just now, as the session reports it: the VAD's
        start and stop, the words, the model's score. Returns when the speech ended."""
        now = time.monotonic()
        start, end = now - seconds - 0.2, now - 0.2
        for event in (SpeechOnset(start), SpeechStarted(start), SpeechStopped(end)):
            self.conv.feed(event)
        self.conv.feed(Transcription(text, now + 0.02))
        self.conv.feed(TurnEndScore(now + 0.04, probability, end))
        return end

    def kinds(self) -> list[type[Event]]:
        return [type(e) for e in self.seen]

    def chats(self) -> list[Any]:
        return self.stub.requests(CHAT)

    async def until(self, kind: type[Event], count: int = 1, within: float = 5.0) -> None:
        deadline = time.monotonic() + within
        while self.kinds().count(kind) < count:
            assert time.monotonic() < deadline, f"no {kind.__name__}; saw {self.kinds()}"
            await asyncio.sleep(0.01)


@pytest.fixture
async def stub() -> AsyncIterator[OpenAIStub]:
    with OpenAIStub() as running:
        running.config.first_token_delay = 0.05
        running.config.default_text = "It is noon."
        yield running


async def test_a_held_reply_is_invisible_until_the_turn_ends_then_plays_at_once(
    stub: OpenAIStub,
) -> None:
    async with Call(stub) as call:
        end = call.say("Set a timer for ten minutes.")
        await call.until(UserTurnEndPredicted)
        await asyncio.sleep(0.1)
        # The LLM was asked with the user's words, and nothing of the answer is out.
        assert len(call.chats()) == 1
        assert call.chats()[0].body["messages"][-1] == {
            "role": "user", "content": "Set a timer for ten minutes.",
        }  # fmt: skip
        assert LLMResponseStarted not in call.kinds() and not call.track.playing
        assert not any(isinstance(m, UserMessage) for m in call.context.messages)
        await call.until(BotStartedSpeaking)
        stopped = next(e for e in call.seen if isinstance(e, UserTurnStopped))
        started = next(e for e in call.seen if isinstance(e, BotStartedSpeaking))
        assert stopped.t == pytest.approx(end + 0.5, abs=0.06)
        assert started.t - stopped.t < 0.1, "the answer was ready when the turn ended"
        kinds = call.kinds()
        assert kinds.index(UserTurnStopped) < kinds.index(LLMResponseStarted)
        assert PreemptiveReplyEnded(used=True) in call.seen
        assert len(call.chats()) == 1  # no second request


async def test_a_held_reply_is_dropped_unseen_when_the_user_goes_on(stub: OpenAIStub) -> None:
    stub.config.token_delay = 0.2  # the answer is still streaming when the user goes on
    stub.config.default_text = "Sure, I can set a timer for you right now."
    async with Call(stub) as call:
        call.say("Set a timer")
        await call.until(UserTurnEndPredicted)
        await asyncio.sleep(0.1)
        call.conv.feed(SpeechOnset(time.monotonic()))
        call.conv.feed(SpeechStarted(time.monotonic()))
        assert call.seen[-1] == PreemptiveReplyEnded(used=False, reason="the user went on")
        await asyncio.sleep(0.4)
        call.say("for ten minutes.")
        await call.until(BotStartedSpeaking)
        assert not call.chats()[0].completed and call.chats()[0].disconnected  # closed
        assert call.chats()[-1].body["messages"][-1]["content"] == ("Set a timer for ten minutes.")
        # One turn, one answer: the client saw one start of an answer.
        assert call.kinds().count(LLMResponseStarted) == 1
        assert call.kinds().count(UserTurnStopped) == 1
        users = [m for m in call.context.messages if isinstance(m, UserMessage)]
        assert [m.text_content() for m in users] == ["Set a timer for ten minutes."]


async def test_the_user_going_on_after_the_answer_started_merges_the_turns(
    stub: OpenAIStub,
) -> None:
    stub.config.default_text = "Sure. What would you like to know about it, and when?"
    stub.config.tts_seconds_per_char = 0.06
    async with Call(stub) as call:
        call.say("I was wondering about the museum.")
        await call.until(BotStartedSpeaking)
        await asyncio.sleep(0.6)  # "Sure." plays: the turn had not ended, after all
        now = time.monotonic()
        call.conv.feed(SpeechOnset(now))
        call.conv.feed(SpeechStarted(now))
        assert Interruption in call.kinds() and not call.track.playing
        merged = next(e for e in call.seen if isinstance(e, UserTurnMerged))
        assert merged.user_text == "I was wondering about the museum."
        assert merged.assistant_text.startswith("Sure")
        # Neither the half turn nor its premature answer is left in the context.
        assert [m.role.value for m in call.context.messages] == ["system"]
        await asyncio.sleep(0.2)
        stub.config.default_text = "At nine."
        call.say("When does it open?")
        await call.until(BotStoppedSpeaking, count=2)
        messages = call.chats()[-1].body["messages"]
        assert messages[1:] == [
            {"role": "user", "content": "I was wondering about the museum. When does it open?"}
        ]
    spoken = [m for m in call.context.messages if isinstance(m, AssistantMessage)]
    assert [m.text_content() for m in spoken] == ["At nine."]  # the whole turn's answer only
    transcripts = [e.content for e in call.seen if isinstance(e, UserTranscript)]
    assert transcripts[-1] == "I was wondering about the museum. When does it open?"


async def test_speaking_again_after_the_merge_window_is_a_new_turn(stub: OpenAIStub) -> None:
    stub.config.default_text = "Sure. What would you like to know about it, and when?"
    stub.config.tts_seconds_per_char = 0.06
    async with Call(stub, merge_window=0.2) as call:
        call.say("Tell me about the museum.")
        await call.until(BotStartedSpeaking)
        await asyncio.sleep(0.4)
        now = time.monotonic()
        call.conv.feed(SpeechOnset(now))
        call.conv.feed(SpeechStarted(now))  # a barge-in, too late to be the same turn
        assert Interruption in call.kinds() and UserTurnMerged not in call.kinds()
        users = [m for m in call.context.messages if isinstance(m, UserMessage)]
        assert [m.text_content() for m in users] == ["Tell me about the museum."]
        spoken = call.context.messages[-1]
        assert isinstance(spoken, AssistantMessage) and spoken.interrupted
