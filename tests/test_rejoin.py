"""While the echo path is unknown the STT's recording reaches back further, and a false
start right before confirmed speech dates it from the false start's onset
(pipeline/hearing/rejoin.py)."""

from __future__ import annotations

import pytest

from pipeline.events import Event, SpeechFalseStart, SpeechOnset, SpeechStarted, SpeechStopped
from pipeline.hearing.rejoin import UNKNOWN_PATH_REACH, FalseStartRejoin


def feed(rejoin: FalseStartRejoin, events: list[Event], unknown: bool = True) -> list[Event]:
    out = []
    for event in events:
        rejoin.see(event)
        out.append(rejoin.for_stt(event, unknown))
    return out


# What the VAD said of a CI run that lost "Is the": speech from 0.35 s, damped at 0.48 s.
CUT = [SpeechOnset(0.35), SpeechFalseStart(0.767), SpeechOnset(0.832), SpeechStarted(0.832)]


def started(t: float) -> SpeechStarted:
    """What the STT is told while the path is unknown: ``t`` less the extra reach."""
    return SpeechStarted(t - UNKNOWN_PATH_REACH)


def test_speech_cut_by_the_canceller_is_recorded_from_its_first_onset() -> None:
    assert feed(FalseStartRejoin(), CUT)[-1] == started(0.35)


def test_while_the_path_is_unknown_the_stt_reaches_further_back() -> None:
    # A caller's first syllables damped without a false start: the onset is just late.
    events = [SpeechOnset(1.0), SpeechStarted(1.0)]
    assert feed(FalseStartRejoin(), events)[-1].t == pytest.approx(1.0 - UNKNOWN_PATH_REACH)
    assert feed(FalseStartRejoin(), events, unknown=False)[-1] == SpeechStarted(1.0)


def test_once_the_echo_path_is_known_the_vads_onset_stands() -> None:
    assert feed(FalseStartRejoin(), CUT, unknown=False)[-1] == SpeechStarted(0.832)


def test_a_false_start_long_before_the_speech_is_not_joined() -> None:
    events = [SpeechOnset(0.3), SpeechFalseStart(0.5), SpeechOnset(1.2), SpeechStarted(1.2)]
    assert feed(FalseStartRejoin(), events)[-1] == started(1.2)


def test_a_false_start_is_joined_to_the_next_speech_only() -> None:
    rejoin = FalseStartRejoin()
    feed(rejoin, [*CUT, SpeechStopped(2.0)])
    assert feed(rejoin, [SpeechOnset(2.5), SpeechStarted(2.5)])[-1] == started(2.5)


def test_other_events_pass_as_they_are() -> None:
    stop = SpeechStopped(1.0)
    assert feed(FalseStartRejoin(), [stop]) == [stop]
