"""Barge-in paused first, in a whole conversation: a backchannel, a cough or the bot's own
echo let the same reply go on; a real interruption stops it (``testkit/conversation_call.py``:
the real conversation and paced track, the stub behind its LLM and TTS)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from pipeline.events import (
    BotPaused,
    BotResumed,
    BotStartedSpeaking,
    BotStoppedSpeaking,
    Interruption,
    LLMResponseStarted,
    SpeechOnset,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    TurnEndScore,
    UserTurnDiscarded,
)
from pipeline.messages import AssistantMessage, UserMessage
from testkit.conversation_call import Call
from testkit.openai_stub import OpenAIStub

ANSWER = "Once upon a time there was a small robot. It lived in a lighthouse by the sea."


@pytest.fixture
async def stub() -> AsyncIterator[OpenAIStub]:
    with OpenAIStub() as running:
        running.config.default_text = ANSWER
        running.config.tts_seconds_per_char = 0.05  # about 2 s of answer
        yield running


async def speaking(call: Call) -> None:
    """The bot answers a question and is half a second into its answer."""
    call.conv.user.add_text("Tell me a story.")
    await call.until(BotStartedSpeaking)
    await asyncio.sleep(0.5)


def voice(call: Call, seconds: float) -> float:
    """The VAD confirms the user's voice over the bot, as the session reports it."""
    onset = time.monotonic() - 0.2
    call.conv.feed(SpeechOnset(onset))
    call.conv.feed(SpeechStarted(onset))
    return onset + seconds


def sent(call: Call) -> tuple[int, int]:
    """(bytes of reply audio sent, bytes ever queued) on the track."""
    return call.track._sent_total, call.track._queued_total


@pytest.mark.e2e  # a call in real time, ~5 s
async def test_a_backchannel_pauses_the_reply_and_it_goes_on_from_the_same_sample(
    stub: OpenAIStub,
) -> None:
    async with Call(stub) as call:
        await speaking(call)
        end = voice(call, 0.35)
        assert call.track.paused and call.track.playing  # silent within a frame, not stopped
        played_at_pause = sent(call)[0]
        await asyncio.sleep(0.3)
        assert sent(call)[0] == played_at_pause  # nothing went out while paused
        call.conv.feed(SpeechStopped(end))
        call.conv.feed(Transcription("Mhm.", time.monotonic()))
        assert not call.track.paused
        resumed = next(e for e in call.seen if isinstance(e, BotResumed))
        assert not resumed.interrupted
        await call.until(BotStoppedSpeaking, within=8)
        # The reply's message is kept at the turn's end, which follows the playout's by a
        # moment (on a loaded machine, more than a poll of ``until``).
        for _ in range(500):
            if any(isinstance(m, AssistantMessage) for m in call.context.messages):
                break
            await asyncio.sleep(0.01)
        played, queued = sent(call)
        assert played == queued  # every sample of the reply went out, once
        assert Interruption not in call.kinds()
        assert call.kinds().count(LLMResponseStarted) == 1 and len(call.chats()) == 1
        assert UserTurnDiscarded(resumed.t, "Mhm.") in call.seen
        spoken = [m for m in call.context.messages if isinstance(m, AssistantMessage)]
        assert [m.text_content() for m in spoken] == [ANSWER]  # the whole reply, once
        users = [m.text_content() for m in call.context.messages if isinstance(m, UserMessage)]
        assert users == ["Tell me a story."]  # "mhm" made no turn
        kinds = call.kinds()
        assert kinds.index(BotPaused) < kinds.index(BotResumed)


@pytest.mark.e2e  # a call in real time, ~5 s
@pytest.mark.parametrize("words", ["", None], ids=["empty transcript", "no transcript"])
async def test_a_cough_resumes(stub: OpenAIStub, words: str | None) -> None:
    async with Call(stub) as call:
        await speaking(call)
        end = voice(call, 0.25)
        call.conv.feed(SpeechStopped(end))
        if words is not None:
            call.conv.feed(Transcription(words, time.monotonic()))
        else:  # the STT failed: no words within the false-interruption timeout (1 s)
            await asyncio.sleep(1.1)
        assert not call.track.paused and Interruption not in call.kinds()
        await call.until(BotStoppedSpeaking, within=8)
        assert len(call.chats()) == 1 and sent(call)[0] == sent(call)[1]


async def test_a_real_interruption_stops_the_reply_and_is_answered(stub: OpenAIStub) -> None:
    async with Call(stub) as call:
        await speaking(call)
        end = voice(call, 0.6)
        call.conv.feed(SpeechStopped(end))
        stub.config.default_text = "Sure, the weather is fine."
        call.conv.feed(Transcription("Wait, what about the weather?", end + 0.25))
        assert Interruption in call.kinds() and not call.track.playing
        assert BotResumed(end + 0.25, interrupted=True) in call.seen
        call.conv.feed(TurnEndScore(end + 0.3, 0.97, end))
        await call.until(LLMResponseStarted, count=2)
        # The response starts as the request leaves: the stub may not have it yet.
        assert await stub.wait_for(lambda: len(call.chats()) >= 2, 5)
        assert call.chats()[-1].body["messages"][-1] == {
            "role": "user", "content": "Wait, what about the weather?",
        }  # fmt: skip
        spoken = next(m for m in call.context.messages if isinstance(m, AssistantMessage))
        assert spoken.interrupted and len(spoken.text_content()) < len(ANSWER)


async def test_speech_that_goes_on_interrupts_before_its_words_are_in(stub: OpenAIStub) -> None:
    async with Call(stub) as call:
        await speaking(call)
        voice(call, 3.0)
        await asyncio.sleep(0.5)
        assert Interruption not in call.kinds() and call.track.paused
        await asyncio.sleep(0.5)  # past 1 s of speech: more than a backchannel
        assert Interruption in call.kinds() and not call.track.playing


async def test_the_bots_own_voice_coming_back_resumes(stub: OpenAIStub) -> None:
    async with Call(stub) as call:
        await speaking(call)
        end = voice(call, 0.5)
        call.conv.feed(SpeechStopped(end))
        call.conv.feed(Transcription("Once upon a time there was", end + 0.2))
        assert not call.track.paused and Interruption not in call.kinds()


async def test_with_pausing_off_the_bot_is_cut_off_at_once(stub: OpenAIStub) -> None:
    async with Call(stub, pause_on_interruption=False) as call:
        await speaking(call)
        voice(call, 0.3)
        assert Interruption in call.kinds() and not call.track.playing


async def test_speech_while_the_reply_runs_dry_for_a_moment_is_judged_too(
    stub: OpenAIStub,
) -> None:
    """TTS slower than playout leaves gaps inside a reply; the echo of its last words
    arrives in such a gap and must be judged like any other, not cut the reply at once."""
    stub.config.tts_chunk_delay = 1.5  # each sentence: a first chunk, then a long gap
    async with Call(stub) as call:
        call.conv.user.add_text("Tell me a story.")
        await call.until(BotStartedSpeaking)
        await call.until(BotStoppedSpeaking)  # the output ran dry, the reply goes on
        assert call.conv.bot_active and not call.track.playing
        end = voice(call, 0.3)
        assert call.track.paused and Interruption not in call.kinds()
        call.conv.feed(SpeechStopped(end))
        call.conv.feed(Transcription("Once upon a time", end + 0.2))
        assert not call.track.paused and Interruption not in call.kinds()
        assert call.kinds().count(LLMResponseStarted) == 1
