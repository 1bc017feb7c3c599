"""The adaptive turn end on the evaluation set, with the real models on generated speech.

Each clip goes through the real Silero VAD, the real transcriber and the real Smart Turn
model; only time is virtual (``testkit/turn_replay.py``), so the figures do not depend on
how busy the machine is. ``bench/turn_taking.py`` measures the same over WebRTC, with
voice-to-voice times, against the fixed window and Pipecat.
"""

from __future__ import annotations

import asyncio

import pytest

from pipeline.hearing.smart_turn import SmartTurnModel
from pipeline.services.embedded import EmbeddedModels
from pipeline.services.local_stt import LocalSTT
from pipeline.turns import UserTurnParams
from pipeline.turns.text_cues import Ending, ending
from testkit.turn_clips import VOICES, complete_clip, eval_set, paused_clip
from testkit.turn_replay import Replay, TurnReplayer, summary

pytestmark = pytest.mark.e2e

ADAPTIVE = UserTurnParams(turn_end="adaptive")
FIXED = UserTurnParams(turn_end="fixed", user_speech_timeout=0.6)


@pytest.fixture(scope="module")
def model() -> SmartTurnModel:
    return SmartTurnModel()


@pytest.fixture(scope="module")
def replays(model: SmartTurnModel) -> dict[str, list[Replay]]:
    """Every clip of the set through both rules, with an STT that hears every word."""
    clips = eval_set()

    async def run(params: UserTurnParams) -> list[Replay]:
        replayer = TurnReplayer(None, model, params)
        return [await replayer.replay(clip) for clip in clips]

    return {"adaptive": asyncio.run(run(ADAPTIVE)), "fixed": asyncio.run(run(FIXED))}


@pytest.mark.parametrize("voice", VOICES)
def test_no_pause_inside_a_turn_ends_it(replays: dict[str, list[Replay]], voice: str) -> None:
    paused = [r for r in replays["adaptive"] if r.clip.paused and r.clip.voice == voice]
    assert len(paused) == 30
    assert [r.clip.name for r in paused if r.early] == []
    assert all(r.wait is not None for r in paused), "every turn ends once it is complete"


@pytest.mark.parametrize("voice", VOICES)
def test_complete_turns_end_sooner_than_the_fixed_window(
    replays: dict[str, list[Replay]], voice: str
) -> None:
    adaptive = summary([r for r in replays["adaptive"] if r.clip.voice == voice], 0.35)
    fixed = summary([r for r in replays["fixed"] if r.clip.voice == voice], 0.35)
    assert adaptive["complete_turns_ended_early"] == 0
    assert adaptive["complete_turns_never_ended"] == 0
    # The fixed rule waits 0.8 s every time; the adaptive one less, at the median.
    assert fixed["complete_wait_p50"] == pytest.approx(0.8, abs=0.06)
    assert adaptive["complete_wait_p50"] < fixed["complete_wait_p50"] - 0.2
    assert adaptive["complete_wait_max"] <= ADAPTIVE.adaptive.max_wait + 0.05
    # Preemptive replies would rarely be wasted: at most 1 in 5 turns.
    assert adaptive["wasted_predictions"] <= adaptive["clips"] / 5


def test_questions_in_the_neural_voice_end_as_soon_as_their_words_are_in(
    replays: dict[str, list[Replay]],
) -> None:
    questions = [
        r
        for r in replays["adaptive"]
        if r.clip.voice == "hibari" and not r.clip.paused and ending(r.clip.text) is Ending.QUESTION
    ]
    assert len(questions) == 11  # "Which platform … leave from?" is no strong cue
    # VAD stop window (0.2 s) + STT (0.05 s) + frame and window granularity.
    assert max(r.wait or 9.0 for r in questions) < 0.4


def test_the_fixed_window_splits_turns_the_adaptive_rule_keeps(
    replays: dict[str, list[Replay]],
) -> None:
    # A faint word in a pause is a false start to the VAD: the adaptive rule counts the
    # silence from it, the fixed window only from the last confirmed speech.
    fixed = {r.clip.name for r in replays["fixed"] if r.clip.paused and r.early}
    adaptive = {r.clip.name for r in replays["adaptive"] if r.clip.paused and r.early}
    assert adaptive == set() and "hibari:unfinished:i-need-to-get-to-the-airport-and|0.6" in fixed


async def test_with_the_embedded_whisper(model: SmartTurnModel) -> None:
    """The same path with the embedded STT's own words, on clips it transcribes right."""
    models = EmbeddedModels.shared()
    await models.stt.get()
    replayer = TurnReplayer(LocalSTT(models), model, ADAPTIVE)
    complete = await replayer.replay(complete_clip("What time does the museum open?", "hibari"))
    assert not complete.early and complete.wait is not None and complete.wait < 0.4
    for text, after in [
        ("Could you book a table for two people on Friday?", "for"),
        ("I can't come on Monday because my car is in the shop.", "because"),
    ]:
        replay = await replayer.replay(paused_clip("unfinished", text, after, 0.6, "hibari"))
        assert not replay.early, (replay.texts, replay.stops)
        assert replay.wait is not None
