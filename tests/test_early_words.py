"""Early words: the VAD's ``SpeechPausing``, the speculative STT pass and score it starts,
and the prediction the adaptive rule makes from them (``pipeline/hearing/transcriber.py``,
``pipeline/hearing/turn_scorer.py``, ``pipeline/turns/stop_adaptive.py``).

The VAD runs on real espeak speech; the STT is the OpenAI-compatible client talking to
the stub over a real socket, its text the length of the audio it was sent, so a test can
tell which cut of the utterance a transcript came from.
"""

from __future__ import annotations

import asyncio
import io
import wave
from collections.abc import Iterator

import numpy as np
import pytest

from pipeline.aggregators.user_messages import UserAggregator
from pipeline.context.llm_context import LLMContext
from pipeline.events import (
    Event,
    SpeechPausing,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    TurnEndScore,
    UserTurnStopped,
)
from pipeline.hearing.transcriber import Transcriber
from pipeline.hearing.vad import VADAnalyzer, VADParams
from pipeline.reply.preemptive import PreemptiveReplies
from pipeline.services.openai_stt import OpenAISTT
from pipeline.turns import UserTurnController, VADTurnStart
from pipeline.turns.stop_adaptive import AdaptiveStopParams, AdaptiveTurnStop
from testkit.openai_stub import OpenAIStub
from testkit.speech import espeak, timeline
from testkit.turn_script import play, rounded
from testkit.vad_feed import frames

QUESTION = "Can you tell me what the answer is?"
RATE = 16000


def seconds_of(wav: bytes) -> str:
    with wave.open(io.BytesIO(wav)) as src:
        return f"{src.getnframes() / src.getframerate():.2f}"


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as running:
        running.config.transcriber = seconds_of
        yield running


def stt_requests(stub: OpenAIStub) -> int:
    return sum(1 for r in stub.requests() if r.path.endswith("/audio/transcriptions"))


def test_the_vad_reports_a_pause_before_its_stop() -> None:
    line = timeline(0.5, espeak(QUESTION), 1.0)
    vad = VADAnalyzer(VADParams(stop_secs=0.2, pause_secs=0.1))
    events = [e for frame, t in frames(line.samples) for e in vad.push(frame, t)]
    kinds = [type(e) for e in events if isinstance(e, SpeechPausing | SpeechStopped)]
    assert kinds[-2:] == [SpeechPausing, SpeechStopped]
    pausing = [e for e in events if isinstance(e, SpeechPausing)][-1]
    stopped = [e for e in events if isinstance(e, SpeechStopped)][-1]
    assert pausing.t == stopped.t  # the same speech end: the speculation holds
    # Off (the default), and never as long as the stop window: no pausing at all.
    for params in (VADParams(stop_secs=0.2), VADParams(stop_secs=0.2, pause_secs=0.2)):
        vad = VADAnalyzer(params)
        assert not any(
            isinstance(e, SpeechPausing) for f, t in frames(line.samples) for e in vad.push(f, t)
        )


async def test_the_speculative_text_is_the_final_one(stub: OpenAIStub) -> None:
    line = timeline(0.5, espeak(QUESTION), 1.0)
    vad = VADAnalyzer(VADParams(stop_secs=0.2, pause_secs=0.1))
    events: list[Event] = []
    stt = OpenAISTT("m", base_url=stub.base_url, api_key="sk-stub")
    transcriber = Transcriber(stt, events.append)
    for frame, t in frames(line.samples):
        transcriber.push_audio(frame, t)
        for event in vad.push(frame, t):
            events.append(event)
            transcriber.handle(event)
        await asyncio.sleep(0.002)  # about real time for the stub's round trip
    while transcriber.pending:
        await asyncio.sleep(0.01)
    finals = [e for e in events if isinstance(e, Transcription) and e.final]
    interims = [e for e in events if isinstance(e, Transcription) and not e.final]
    assert len(finals) == 1 and stt_requests(stub) == 1, "one request, made at the pause"
    assert transcriber.early_used == 1 and transcriber.early_wasted == 0
    # The interim (if it came before the stop) and the final are the same words.
    assert all(i.text == finals[0].text for i in interims)
    stop_at = next(i for i, e in enumerate(events) if isinstance(e, SpeechStopped))
    assert not any(isinstance(e, Transcription) and e.final for e in events[:stop_at])
    await transcriber.close()
    await stt.aclose()


async def test_a_pause_spoken_through_is_not_taken_for_the_utterance(stub: OpenAIStub) -> None:
    speech = (8000 * np.sin(np.arange(3 * RATE) * 0.05)).astype(np.int16)
    events: list[Event] = []
    stt = OpenAISTT("m", base_url=stub.base_url, api_key="sk-stub")
    transcriber = Transcriber(stt, events.append, pre_roll_secs=0.0, tail_secs=0.0)
    script = {0.3: SpeechStarted(0.2), 1.1: SpeechPausing(1.0), 2.1: SpeechPausing(2.0)}
    script[2.3] = SpeechStopped(2.0)
    for frame, t in frames(speech):
        transcriber.push_audio(frame, t)
        for at in [at for at in script if at <= t]:
            transcriber.handle(script.pop(at))
        await asyncio.sleep(0.002)
    while transcriber.pending:
        await asyncio.sleep(0.01)
    finals = [e.text for e in events if isinstance(e, Transcription) and e.final]
    assert finals == ["1.80"], "the utterance up to the second pause (0.2 .. 2.0 s)"
    assert transcriber.early_wasted == 1 and transcriber.early_used == 1
    await transcriber.close()
    await stt.aclose()


def run(script: list, lead: float = 0.3) -> list[Event]:  # type: ignore[type-arg]
    out: list[Event] = []
    stop = AdaptiveTurnStop(AdaptiveStopParams(), lead=lambda: lead)
    controller = UserTurnController([VADTurnStart()], [stop], emit=out.append)
    play(controller, script)
    return rounded(out, 6)


def kinds_at(events: list[Event], kind: type) -> list[float]:
    return [e.t for e in events if isinstance(e, kind)]  # type: ignore[attr-defined]


def test_a_clear_question_is_foreseen_at_the_pause_and_ends_at_the_stop() -> None:
    from pipeline.events import UserTurnEndPredicted

    early = [
        SpeechStarted(0.0), 1.1, SpeechPausing(1.0),
        1.15, TurnEndScore(1.15, 0.97, 1.0),
        1.16, Transcription(QUESTION, 1.16, final=False),
        1.2, SpeechStopped(1.0), 1.21, Transcription(QUESTION, 1.21), 5.0,
    ]  # fmt: skip
    out = run(early)
    assert kinds_at(out, UserTurnEndPredicted) == [1.16]
    # The pause's score stands at the stop: no second wait for the model.
    assert kinds_at(out, UserTurnStopped) == [1.21]


def test_a_question_is_foreseen_on_its_words_before_the_model_answers() -> None:
    from pipeline.events import UserTurnEndPredicted

    script = [
        SpeechStarted(0.0), 1.1, SpeechPausing(1.0),
        1.15, Transcription("is there a bank near the hotel", 1.15, final=False),
        1.19, TurnEndScore(1.19, 0.5, 1.0), 1.2,
    ]  # fmt: skip
    assert kinds_at(run(script), UserTurnEndPredicted) == [1.15]
    statement = [*script[:3], 1.15, Transcription("I lost my card yesterday", 1.15, final=False)]
    assert kinds_at(run([*statement, 1.2]), UserTurnEndPredicted) == []


def test_an_unsure_model_or_a_statement_foresees_nothing_early() -> None:
    from pipeline.events import UserTurnEndPredicted

    for p, words in ((0.5, QUESTION), (0.97, "I lost my card yesterday.")):
        script = [
            SpeechStarted(0.0), 1.1, SpeechPausing(1.0), 1.15, TurnEndScore(1.15, p, 1.0),
            1.16, Transcription(words, 1.16, final=False), 1.19,
        ]  # fmt: skip
        assert kinds_at(run(script), UserTurnEndPredicted) == []


def test_a_score_of_a_pause_spoken_through_is_not_used_at_a_later_stop() -> None:
    script = [
        SpeechStarted(0.0), 1.1, SpeechPausing(1.0), 1.15, TurnEndScore(1.15, 0.97, 1.0),
        2.1, SpeechPausing(2.0), 2.2, SpeechStopped(2.0),
        2.21, Transcription(QUESTION, 2.21), 5.0,
    ]  # fmt: skip
    # No score for the speech that ended at 2.0: the rule waits for the model, up to
    # its timeout after the stop was seen (2.2 + 0.35), then decides without it.
    (stopped,) = kinds_at(run(script), UserTurnStopped)
    assert stopped > 2.5


def test_a_reply_foreseen_on_early_words_is_made_on_them() -> None:
    context = LLMContext()
    user = UserAggregator(context, lambda _: None)
    user.handle(Transcription("is there a bank near", 1.0, final=False))
    user.handle(Transcription(QUESTION, 1.1, final=False))
    assert user.pending_message() == {"role": "user", "content": QUESTION}
    user.handle(Transcription(QUESTION, 1.2))
    assert user.pending_message() == {"role": "user", "content": QUESTION}
    user.handle(UserTurnStopped(1.3, "adaptive"))
    assert user.pending_message() is None


class AudioSink:
    """Where a released reply's audio would go (never released here)."""

    playing = False

    def write(self, pcm: object, sample_rate: int, text: str | None = None) -> None: ...

    def mark(self, callback: object) -> None: ...

    def flush(self) -> None: ...


async def test_a_held_reply_on_other_words_gives_way_to_the_new_one() -> None:
    launched: list[list[dict[str, str]]] = []
    ended: list[Event] = []

    def launch(messages, emit, output):  # type: ignore[no-untyped-def]
        launched.append(messages)
        return asyncio.get_running_loop().create_task(asyncio.sleep(10))

    replies = PreemptiveReplies(launch, ended.append, AudioSink())
    first = [{"role": "user", "content": "What time"}]
    second = [{"role": "user", "content": "What time is it?"}]
    replies.start(first, None)
    replies.start(first, None)  # the same words: the held reply stands
    replies.start(second, None)
    assert launched == [first, second]
    assert [getattr(e, "reason", None) for e in ended] == ["the words changed"]
    replies.drop("done")
