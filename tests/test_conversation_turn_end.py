"""The end of the user's turn in a whole conversation: preemptive replies held, released
or dropped, and a turn that ended too early merged with what the user said next
(``testkit/conversation_call.py``: the real conversation, the stub behind its services)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

import pipeline.conversation
from pipeline.events import (
    BotStartedSpeaking,
    BotStoppedSpeaking,
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
from testkit.conversation_call import Call
from testkit.openai_stub import OpenAIStub


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
        # The answer was ready when the turn ended: it starts without an LLM round trip
        # (generous: a loaded machine delays the playout task, not the order).
        assert started.t - stopped.t < 0.5, "the answer was ready when the turn ended"
        kinds = call.kinds()
        assert kinds.index(UserTurnStopped) < kinds.index(LLMResponseStarted)
        assert PreemptiveReplyEnded(used=True) in call.seen
        assert len(call.chats()) == 1  # no second request


async def test_the_turn_ends_at_its_deadline_with_no_audio_frame_to_drive_it(
    stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between audio frames (here: none at all) the turn still ends on time: a timer at
    its deadline, not the next frame or the periodic tick (made 1 s here)."""
    monkeypatch.setattr(pipeline.conversation, "TICK_SECONDS", 1.0)
    async with Call(stub) as call:
        arrived: list[float] = []
        call.conv.events.on(UserTurnStopped, lambda _: arrived.append(time.monotonic()))
        end = call.say("Set a timer for ten minutes.")
        await call.until(UserTurnStopped)
        stopped = next(e for e in call.seen if isinstance(e, UserTurnStopped))
        assert stopped.t == pytest.approx(end + 0.5, abs=0.06)
        assert arrived[0] - stopped.t < 0.25  # the tick would have been ~0.7 s late


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
        assert call.track.paused and Interruption not in call.kinds()  # paused, judging
        await asyncio.sleep(0.7)
        end = time.monotonic() - 0.2
        call.conv.feed(SpeechStopped(end))
        stub.config.default_text = "At nine."
        call.conv.feed(Transcription("When does it open?", end + 0.22))  # no backchannel
        assert Interruption in call.kinds() and not call.track.playing
        merged = next(e for e in call.seen if isinstance(e, UserTurnMerged))
        assert merged.user_text == "I was wondering about the museum."
        assert merged.assistant_text.startswith("Sure")
        # Neither the half turn nor its premature answer is left in the context.
        assert [m.role.value for m in call.context.messages] == ["system"]
        call.conv.feed(TurnEndScore(end + 0.24, 0.97, end))
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
        await asyncio.sleep(1.1)  # speech past a backchannel's length: an interruption
        assert Interruption in call.kinds() and UserTurnMerged not in call.kinds()
        users = [m for m in call.context.messages if isinstance(m, UserMessage)]
        assert [m.text_content() for m in users] == ["Tell me about the museum."]
        spoken = call.context.messages[-1]
        assert isinstance(spoken, AssistantMessage) and spoken.interrupted
