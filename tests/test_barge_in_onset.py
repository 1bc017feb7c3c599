"""The bot paused at the VAD's onset (``pipeline/interruptions/barge_in.py``): held until the VAD
confirms the speech (then judged as before) or drops it (then resumed at once)."""

from __future__ import annotations

from pipeline.events import BotPaused, BotResumed, Event, SpeechStopped, Transcription
from pipeline.interruptions.barge_in import ONSET_HOLD_LIMIT, BargeIn, OnsetPause


class Output:
    """The paced track as barge-in sees it."""

    def __init__(self, playing: bool = True) -> None:
        self.playing = playing
        self.paused = False

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False


class Session:
    """A barge-in over a fake output, with what it told the conversation."""

    def __init__(
        self, at_onset: OnsetPause = "on", enabled: bool = True, playing: bool = True
    ) -> None:
        self.output = Output(playing)
        self.seen: list[Event] = []
        self.interrupted: list[float] = []
        self.dismissed: list[str] = []
        self.barge_in = BargeIn(
            self.output,
            self.interrupted.append,
            lambda t, text: self.dismissed.append(text),
            self.seen.append,
            enabled=enabled,
            at_onset=at_onset,
        )

    def kinds(self) -> list[type[Event]]:
        return [type(e) for e in self.seen]


def test_an_onset_pauses_and_a_false_start_resumes_at_once() -> None:
    s = Session()
    assert s.barge_in.onset(1.0)
    assert s.output.paused and s.barge_in.held and not s.barge_in.pending
    assert s.seen == [BotPaused(1.0)]
    s.barge_in.false_start(1.2)
    assert not s.output.paused and not s.barge_in.held
    assert s.seen == [BotPaused(1.0), BotResumed(1.2, unconfirmed=True)]
    assert not s.interrupted and not s.dismissed  # nothing was said: no turn to discard


def test_a_confirmed_onset_is_judged_as_before_with_one_pause() -> None:
    s = Session()
    s.barge_in.onset(1.0)
    assert s.barge_in.pause(1.0, 1.0)
    assert s.output.paused and s.barge_in.pending and not s.barge_in.held
    s.barge_in.handle(SpeechStopped(1.4))
    s.barge_in.handle(Transcription("Mhm.", 1.6))
    assert not s.output.paused and s.dismissed == ["Mhm."]
    assert s.kinds() == [BotPaused, BotResumed]  # one pause, resumed once
    assert s.seen[1] == BotResumed(1.6)


def test_confirmed_speech_that_goes_on_interrupts() -> None:
    s = Session()
    s.barge_in.onset(1.0)
    s.barge_in.pause(1.0, 1.0)
    s.barge_in.advance(2.1)  # past max_backchannel_seconds of speech
    assert s.interrupted == [2.1]
    assert s.seen == [BotPaused(1.0), BotResumed(2.1, interrupted=True)]


def test_a_false_start_after_the_confirmation_changes_nothing() -> None:
    s = Session()
    s.barge_in.onset(1.0)
    s.barge_in.pause(1.0, 1.0)
    s.barge_in.false_start(1.5)  # a later onset's, say: the pause is the decider's now
    assert s.output.paused and s.barge_in.pending and s.kinds() == [BotPaused]


def test_an_onset_that_never_settles_resumes_after_the_hold_limit() -> None:
    s = Session()
    s.barge_in.onset(1.0)
    s.barge_in.advance(1.0 + ONSET_HOLD_LIMIT / 2)
    assert s.output.paused
    s.barge_in.advance(1.0 + ONSET_HOLD_LIMIT)
    assert not s.output.paused and not s.barge_in.held
    assert s.seen[-1] == BotResumed(1.0 + ONSET_HOLD_LIMIT, unconfirmed=True)


def test_without_pausing_at_onset_the_pause_waits_for_the_confirmation() -> None:
    s = Session(at_onset="off")
    assert not s.barge_in.onset(1.0)
    assert not s.output.paused and not s.seen
    assert s.barge_in.pause(1.0, 1.2)
    assert s.output.paused and s.seen == [BotPaused(1.2)]


def test_nothing_playing_or_pausing_off_means_no_pause_at_onset() -> None:
    idle = Session(playing=False)
    assert not idle.barge_in.onset(1.0) and not idle.output.paused
    assert idle.barge_in.onset(1.0, mid_reply=True)  # the reply's output ran dry a moment
    off = Session(enabled=False)
    assert not off.barge_in.onset(1.0) and not off.output.paused


def test_an_onset_while_judging_or_held_does_not_pause_again() -> None:
    s = Session()
    s.barge_in.onset(1.0)
    assert not s.barge_in.onset(1.1)
    s.barge_in.pause(1.0, 1.0)
    assert not s.barge_in.onset(1.5)
    assert s.kinds() == [BotPaused]


def test_cancel_forgets_a_held_pause() -> None:
    s = Session()
    s.barge_in.onset(1.0)
    s.barge_in.cancel()  # the reply was cut some other way (the output flushed)
    assert not s.barge_in.held
    s.barge_in.false_start(1.2)
    assert s.kinds() == [BotPaused]  # no resume of a reply that is gone


def test_auto_pauses_at_onset_only_once_no_echo_can_come_back() -> None:
    s = Session(at_onset="auto")
    echo = [True]  # the echo canceller's view: unknown yet, or an echo path present
    s.barge_in.echo_possible = lambda: echo[0]
    assert not s.barge_in.onset(1.0) and not s.output.paused  # confirmed first
    echo[0] = False  # ruled out: a browser that cancels its own echo
    assert s.barge_in.onset(2.0) and s.output.paused and s.seen == [BotPaused(2.0)]
