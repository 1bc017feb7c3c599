"""Pausing at the VAD's onset in a whole conversation (``testkit/conversation_call.py``:
the real conversation and paced track, the stub behind its LLM and TTS): with scripted VAD
events, and with the real VAD hearing generated speech and a short burst of voice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest

from pipeline.events import (
    BotPaused,
    BotResumed,
    BotStartedSpeaking,
    BotStoppedSpeaking,
    Event,
    Interruption,
    LLMResponseStarted,
    SpeechFalseStart,
    SpeechOnset,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    UserTurnDiscarded,
)
from pipeline.hearing.vad import VADAnalyzer
from pipeline.turns.mute_names import mute_strategies
from testkit.conversation_call import Call
from testkit.openai_stub import OpenAIStub
from testkit.speech import espeak
from testkit.vad_feed import frames

# e2e for its cost: whole calls in real time with the real VAD (~20 s).
pytestmark = pytest.mark.e2e

ANSWER = "Once upon a time there was a small robot. It lived in a lighthouse by the sea."


@pytest.fixture
async def stub() -> AsyncIterator[OpenAIStub]:
    with OpenAIStub() as running:
        running.config.default_text = ANSWER
        running.config.tts_seconds_per_char = 0.05  # about 4 s of answer
        yield running


async def speaking(call: Call, echo: bool = False) -> None:
    """The bot answers a question and is half a second into its answer; ``echo``: as
    far as the echo canceller knows, the bot's voice may come back (else it cannot)."""
    call.conv.barge_in.echo_possible = lambda: echo
    call.conv.user.add_text("Tell me a story.")
    await call.until(BotStartedSpeaking)
    await asyncio.sleep(0.5)


def played_whole(call: Call) -> bool:
    """Every sample of the reply went out, once."""
    return call.track._sent_total == call.track._queued_total


def resumed(call: Call) -> list[BotResumed]:
    return [e for e in call.seen if isinstance(e, BotResumed)]


async def test_a_false_start_resumes_and_the_reply_plays_whole(stub: OpenAIStub) -> None:
    async with Call(stub) as call:
        await speaking(call)
        now = time.monotonic()
        call.conv.feed(SpeechOnset(now))
        assert call.track.paused and call.kinds().count(BotPaused) == 1
        call.conv.feed(SpeechFalseStart(now + 0.15))
        assert not call.track.paused and resumed(call) == [BotResumed(now + 0.15, unconfirmed=True)]
        await call.until(BotStoppedSpeaking, within=8)
        assert played_whole(call) and Interruption not in call.kinds()
        assert call.kinds().count(LLMResponseStarted) == 1
        assert UserTurnDiscarded not in call.kinds()  # no turn began: none to discard


async def test_a_confirmed_onset_is_one_pause_judged_as_before(stub: OpenAIStub) -> None:
    async with Call(stub) as call:
        await speaking(call)
        onset = time.monotonic()
        call.conv.feed(SpeechOnset(onset))
        call.conv.feed(SpeechStarted(onset))
        assert call.track.paused and call.conv.barge_in.pending
        call.conv.feed(SpeechStopped(onset + 0.3))
        call.conv.feed(Transcription("Mhm.", onset + 0.5))
        assert not call.track.paused and resumed(call) == [BotResumed(onset + 0.5)]
        assert call.kinds().count(BotPaused) == 1
        assert UserTurnDiscarded(onset + 0.5, "Mhm.") in call.seen
        await call.until(BotStoppedSpeaking, within=8)
        assert played_whole(call) and Interruption not in call.kinds()


async def test_a_muted_user_does_not_pause_the_bot_at_onset(stub: OpenAIStub) -> None:
    async with Call(stub, mute_strategies=mute_strategies(["bot_speaking"])) as call:
        await speaking(call)
        now = time.monotonic()
        call.conv.feed(SpeechOnset(now))
        assert not call.track.paused
        call.conv.feed(SpeechStarted(now))  # dropped by mute: no barge-in
        assert not call.track.paused and BotPaused not in call.kinds()


@pytest.mark.parametrize(
    ("setting", "echo"), [("off", False), ("auto", True)], ids=["off", "auto with an echo"]
)
async def test_else_the_pause_waits_for_the_confirmation(
    stub: OpenAIStub, setting: str, echo: bool
) -> None:
    async with Call(stub, pause_at_onset=setting) as call:
        await speaking(call, echo)
        now = time.monotonic()
        call.conv.feed(SpeechOnset(now))
        assert not call.track.paused and BotPaused not in call.kinds()
        call.conv.feed(SpeechStarted(now))
        assert call.track.paused and call.kinds().count(BotPaused) == 1


# -- the real VAD -----------------------------------------------------------------------


async def hear(call: Call, audio: np.ndarray) -> list[tuple[type[Event], bool]]:
    """``audio`` (16 kHz int16, then a second of silence) through the real VAD in real
    time, its events fed to the conversation as the session feeds them; returns each
    event's type and whether the bot was paused once it had been fed."""
    vad = VADAnalyzer()
    heard = []
    for frame, _ in frames(np.concatenate([audio, np.zeros(16000, np.int16)])):
        for event in vad.push(frame, time.monotonic()):
            call.conv.feed(event)
            heard.append((type(event), call.track.paused))
        await asyncio.sleep(0.02)
    return heard


async def test_the_real_vad_pauses_at_a_barge_in_before_confirming_it(stub: OpenAIStub) -> None:
    speech = espeak("Wait, stop. Tell me about the weather instead, please.")
    async with Call(stub) as call:
        await speaking(call)
        heard = await hear(call, speech)
        # Silent from the onset on, through the confirmation: one pause.
        assert heard[:2] == [(SpeechOnset, True), (SpeechStarted, True)]
        assert call.kinds().count(BotPaused) == 1
        # Speech past a backchannel's length: the pause became the interruption.
        assert Interruption in call.kinds() and not call.track.playing
        assert resumed(call) == [BotResumed(resumed(call)[0].t, interrupted=True)]


async def test_the_real_vad_lets_a_short_burst_of_voice_go(stub: OpenAIStub) -> None:
    burst = espeak("Hey.")[: round(0.12 * 16000)]  # 120 ms: an onset, never a confirmation
    async with Call(stub) as call:
        await speaking(call)
        heard = await hear(call, burst)
        assert heard == [(SpeechOnset, True), (SpeechFalseStart, False)]
        assert call.kinds().count(BotPaused) == 1
        assert [e.unconfirmed for e in resumed(call)] == [True]
        assert not call.track.paused
        await call.until(BotStoppedSpeaking, within=8)
        assert played_whole(call) and Interruption not in call.kinds()
        assert call.kinds().count(LLMResponseStarted) == 1
