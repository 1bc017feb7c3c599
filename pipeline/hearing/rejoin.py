"""Speech the echo canceller cut in two, joined again for the STT.

While the echo path is unknown, the canceller damps frames that follow the bot's
envelope (:mod:`pipeline.audio.near_end`), and a caller's syllable that happens to do so
is damped with them. If that happens in the first 0.2 s of their speech, the VAD calls it
a false start and confirms the speech only at the next onset: the STT, starting its
pre-roll there, lost "Is the" of "Is the pharmacy open on Sundays?" asked over the
greeting (tests/test_greeting_overlap.py failed CI so). A false start followed within
``REJOIN_GAP`` by confirmed speech, while the path is unknown, was that speech's start:
the STT's recording begins at the false start's onset (it hears the audio as it came).
The VAD and the turn logic keep the VAD's own onset.

Damped syllables that leave no false start just delay the onset: a caller who began
0-0.6 s into the greeting was confirmed 0.24 s late at the median, 0.35 s at p90 and
0.44 s at worst (``bench/greeting_onset.py``, hibari's greeting, no echo), and in 27 %
of runs the STT's 0.3 s pre-roll no longer reached the first word. So while the path is
unknown the recording reaches ``UNKNOWN_PATH_REACH`` further back (0 of 160 runs then).
The cost is that much more of the raw audio before the speech: silence, or the bot's
echo on a speakerphone until the canceller has found it (a second or two).
"""

from __future__ import annotations

from pipeline.events import Event, SpeechFalseStart, SpeechOnset, SpeechStarted

REJOIN_GAP = 0.3  # seconds from a false start's end to the next confirmed onset
UNKNOWN_PATH_REACH = 0.3  # seconds the STT reaches back beyond its pre-roll meanwhile


class FalseStartRejoin:
    """Fed every VAD event (:meth:`see`); :meth:`for_stt` gives the event the STT should
    take in its place."""

    def __init__(self, gap: float = REJOIN_GAP, reach: float = UNKNOWN_PATH_REACH) -> None:
        self.gap = gap
        self.reach = reach
        self._onset: float | None = None  # the latest SpeechOnset's time
        self._cut: tuple[float, float] | None = None  # (onset, end) of the latest false start

    def see(self, event: Event) -> None:
        if isinstance(event, SpeechOnset):
            self._onset = event.t
        elif isinstance(event, SpeechFalseStart) and self._onset is not None:
            self._cut = (self._onset, event.t)

    def for_stt(self, event: Event, path_unknown: bool) -> Event:
        """``event``, or for a SpeechStarted while the echo path is unknown, one dated
        ``reach`` earlier, from the onset of a false start right before if there was one."""
        if not isinstance(event, SpeechStarted):
            return event
        cut, self._cut = self._cut, None
        if not path_unknown:
            return event
        start = event.t
        if cut is not None and 0.0 <= event.t - cut[1] <= self.gap:
            start = cut[0]
        return SpeechStarted(start - self.reach)
