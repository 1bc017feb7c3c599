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
"""

from __future__ import annotations

from pipeline.events import Event, SpeechFalseStart, SpeechOnset, SpeechStarted

REJOIN_GAP = 0.3  # seconds from a false start's end to the next confirmed onset


class FalseStartRejoin:
    """Fed every VAD event (:meth:`see`); :meth:`for_stt` gives the event the STT should
    take in its place."""

    def __init__(self, gap: float = REJOIN_GAP) -> None:
        self.gap = gap
        self._onset: float | None = None  # the latest SpeechOnset's time
        self._cut: tuple[float, float] | None = None  # (onset, end) of the latest false start

    def see(self, event: Event) -> None:
        if isinstance(event, SpeechOnset):
            self._onset = event.t
        elif isinstance(event, SpeechFalseStart) and self._onset is not None:
            self._cut = (self._onset, event.t)

    def for_stt(self, event: Event, path_unknown: bool) -> Event:
        """``event``, or for a SpeechStarted right after a false start while the echo
        path is unknown, one dated from the false start's onset."""
        if not isinstance(event, SpeechStarted):
            return event
        cut, self._cut = self._cut, None
        if path_unknown and cut is not None and 0.0 <= event.t - cut[1] <= self.gap:
            return SpeechStarted(cut[0])
        return event
