"""Back-pressure from playout to TTS: speech is synthesized at most a few seconds ahead of
what has been played, so a long answer buffers seconds, not minutes, and a barge-in
throws little synthesis away. Held (preemptive) and paused replies stop synthesizing at
the limit and go on when released or resumed.

The whole conversation is real (``testkit/conversation_call.py``: the paced track read in
real time, the OpenAI-compatible services); the stub behind them answers at once, so
without back-pressure every sentence would be synthesized within moments.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import numpy as np
import pytest

from pipeline.events import BotResponseEnded, BotStartedSpeaking, BotStoppedSpeaking, Event
from pipeline.messages import AssistantMessage
from pipeline.reply.bot_turn import BotTurn
from pipeline.reply.playout_pacing import PlayoutPacer
from pipeline.reply.preemptive import HeldReply
from server.media.outbound_track import OUT_RATE
from server.settings import Settings
from testkit.conversation_call import Call
from testkit.openai_stub import TTS_RATE, OpenAIStub
from testkit.waits import until

# e2e for its cost: whole answers played out in real time (~18 s).
pytestmark = pytest.mark.e2e

SPEECH = "/v1/audio/speech"
AHEAD = 1.0  # the limit these tests run with, in seconds
NUMBERS = "one two three four five six seven eight nine ten eleven twelve".split()
# Sentences of one length (about 0.5 s of stub speech each), no commas: each is one TTS call.
LONG = " ".join(f"Here is sentence {n:>6} of a long story about a cat." for n in NUMBERS * 2)
SHORT = " ".join(f"Here is sentence {n:>6} of a long story about a cat." for n in NUMBERS[:8])
# What may be synthesized but unplayed: the limit, one sentence begun just under it, and a
# few frames of slack (the track sends 20 ms at a time; resampling holds a few samples).
SLACK = 0.1


@pytest.fixture
async def stub() -> AsyncIterator[OpenAIStub]:
    with OpenAIStub() as running:
        running.config.tts_seconds_per_char = 0.01
        yield running


def sentence_seconds(stub: OpenAIStub) -> float:
    """The longest sentence's audio."""
    texts = [r.body["input"] for r in stub.requests(SPEECH)]
    return max(stub.tts_samples(t) for t in texts) / TTS_RATE


def synthesized(stub: OpenAIStub) -> float:
    """Seconds of speech asked of the TTS so far (a request counts from when it is made)."""
    return sum(stub.tts_samples(r.body["input"]) for r in stub.requests(SPEECH)) / TTS_RATE


def played(call: Call) -> float:
    """Seconds of reply audio the track has sent."""
    return call.track._sent_total / (2 * OUT_RATE)


class AheadProbe:
    """Samples synthesized-but-unplayed seconds every 10 ms; keeps the worst."""

    def __init__(self, stub: OpenAIStub, call: Call) -> None:
        self.stub, self.call = stub, call
        self.worst = 0.0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.worst = max(self.worst, synthesized(self.stub) - played(self.call))
            await asyncio.sleep(0.01)

    async def stop(self) -> float:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        return self.worst


async def test_a_long_answer_is_synthesized_at_most_the_limit_ahead_of_playout(
    stub: OpenAIStub,
) -> None:
    stub.config.default_text = LONG
    async with Call(stub, tts_ahead=AHEAD) as call:
        probe = AheadProbe(stub, call)
        call.conv.user.add_text("Tell me a long story.")
        await call.until(BotStartedSpeaking)
        await until(lambda: played(call) > 2.5, within=30, what="2.5 s of the answer played")
        worst = await probe.stop()
        limit = AHEAD + sentence_seconds(stub) + SLACK
        assert worst <= limit, f"{worst:.2f} s synthesized ahead of playout (limit {limit:.2f})"
        # Pacing leaves no gaps: the output has not run dry since the answer began.
        assert BotStoppedSpeaking not in call.kinds()
        assert played(call) > 2.5


async def test_a_barge_in_mid_answer_leaves_little_synthesis_behind(stub: OpenAIStub) -> None:
    stub.config.default_text = LONG
    async with Call(stub, tts_ahead=AHEAD) as call:
        call.conv.user.add_text("Tell me a long story.")
        await call.until(BotStartedSpeaking)
        await until(lambda: played(call) > 1.8, within=30, what="1.8 s of the answer played")
        call.conv.interrupt()
        requests, seconds, heard = len(stub.requests(SPEECH)), synthesized(stub), played(call)
        await asyncio.sleep(0.5)
        assert len(stub.requests(SPEECH)) == requests, "no TTS request after the barge-in"
        wasted = seconds - heard
        assert wasted <= AHEAD + sentence_seconds(stub) + SLACK, f"{wasted:.2f} s thrown away"
        assert requests < len(NUMBERS * 2) // 2


async def test_a_held_reply_stops_at_the_limit_and_completes_when_released(
    stub: OpenAIStub,
) -> None:
    stub.config.default_text = SHORT
    async with Call(stub, tts_ahead=AHEAD) as call:
        messages = [*call.context.to_openai(), {"role": "user", "content": "A story?"}]
        seen: list[Event] = []
        held = HeldReply(messages, None, seen.append, call.track)
        assert held.output is not None
        turn = BotTurn(call.context, call.llm, held.emit, call.tts, held.output,
                       messages=messages, ahead=AHEAD)  # fmt: skip
        held.task = asyncio.create_task(turn.run())
        await asyncio.sleep(1.5)
        # Held audio counts as ahead: synthesis stopped at the limit; nothing played.
        assert played(call) == 0
        count, ahead = len(stub.requests(SPEECH)), synthesized(stub)
        assert ahead <= AHEAD + sentence_seconds(stub) + SLACK, f"{ahead:.2f} s held"
        await asyncio.sleep(0.3)
        assert len(stub.requests(SPEECH)) == count, "a held reply waits, it does not go on"
        held.release()
        await asyncio.wait_for(held.task, timeout=10)
        assert any(isinstance(e, BotResponseEnded) for e in seen)
        assert len(stub.requests(SPEECH)) == len(NUMBERS[:8])
        assert played(call) >= synthesized(stub) - 0.05  # all of it went out


async def test_a_paused_reply_stops_at_the_limit_and_completes_when_resumed(
    stub: OpenAIStub,
) -> None:
    stub.config.default_text = SHORT
    async with Call(stub, tts_ahead=AHEAD) as call:
        call.conv.user.add_text("Tell me a story.")
        await call.until(BotStartedSpeaking)
        await asyncio.sleep(0.3)
        call.track.pause()  # what a barge-in does while it judges the user's voice
        await asyncio.sleep(1.5)
        count, ahead = len(stub.requests(SPEECH)), synthesized(stub) - played(call)
        assert ahead <= AHEAD + sentence_seconds(stub) + SLACK, f"{ahead:.2f} s paused ahead"
        await asyncio.sleep(0.3)
        assert len(stub.requests(SPEECH)) == count, "a paused reply waits, it does not go on"
        call.track.resume()
        started = time.monotonic()
        await call.until(BotStoppedSpeaking, within=10)
        assert time.monotonic() - started > 1.0  # the rest of the answer played after it
        assert len(stub.requests(SPEECH)) == len(NUMBERS[:8])
        last = call.context.messages[-1]
        assert isinstance(last, AssistantMessage) and not last.interrupted
        assert last.text_content() == SHORT


def test_the_limit_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().tts_ahead_seconds == 3.0
    monkeypatch.setenv("PARLEY_TTS_AHEAD_SECONDS", "1.5")
    assert Settings().tts_ahead_seconds == 1.5
    monkeypatch.setenv("PARLEY_TTS_AHEAD_SECONDS", "-1")
    with pytest.raises(ValueError, match="tts_ahead_seconds"):
        Settings()


class MarkingOutput:
    """Records writes (length, text) and keeps the marks for the test to fire."""

    playing = False

    def __init__(self) -> None:
        self.writes: list[tuple[int, str | None]] = []
        self.marks: list[Callable[[], None]] = []

    def write(self, pcm: bytes | np.ndarray, sample_rate: int, text: str | None = None) -> None:
        self.writes.append((len(pcm), text))

    def mark(self, callback: Callable[[], None]) -> None:
        self.marks.append(callback)

    def flush(self) -> None:
        self.marks.clear()


async def test_the_pacer_writes_marked_slices_and_makes_room_as_they_play() -> None:
    output = MarkingOutput()
    pacer = PlayoutPacer(output, ahead=0.5)
    pacer.write(np.zeros(24000, np.int16), 24000, "One.")  # 1 s, in 0.2 s slices
    assert output.writes == [(4800, "One.")] + [(4800, None)] * 4
    assert len(output.marks) == 5 and pacer.unplayed == pytest.approx(1.0)
    room = asyncio.create_task(pacer.room())
    for mark in output.marks[:2]:
        mark()  # 0.4 s played, 0.6 s to go: still too far ahead
    await asyncio.sleep(0.02)
    assert not room.done()
    output.marks[2]()  # 0.4 s to go
    await asyncio.wait_for(room, 1.0)


async def test_with_no_limit_the_pacer_writes_through_and_never_waits() -> None:
    output = MarkingOutput()
    pacer = PlayoutPacer(output, ahead=0)
    pacer.write(np.zeros(240000, np.int16).tobytes(), 24000, "Ten seconds.")
    assert output.writes == [(480000, "Ten seconds.")] and output.marks == []
    await asyncio.wait_for(pacer.room(), 0.1)
