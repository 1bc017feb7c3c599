"""Nothing the user says vanishes silently: speech that made no turn is reported, with why.

Every stretch of the user's speech ends as part of a user turn (its words go into the
context), or as a :class:`~pipeline.events.UserSpeechDiscarded` with one reason of a
small closed set (:data:`REASONS`):

- ``backchannel``: words over the bot that only show the user is listening; the bot
  went on (the barge-in's verdict);
- ``echo``: the bot's own recent words coming back; the bot went on;
- ``no_words``: speech in which the STT heard no words (a cough, a breath, a noise), or
  none within the barge-in's ``false_interruption_timeout``; over the bot or not;
- ``muted``: spoken while the user was muted (``PARLEY_USER_MUTE``): an utterance that
  began muted is not even transcribed, the words of one the mute caught halfway are
  dropped;
- ``stt_error``: the STT failed or timed out: whatever was said is lost;
- ``call_ended``: the call ended while the speech was still being recorded or
  transcribed (the caller hung up mid-sentence, or an overloaded server had not got to
  it: a 10-call bench on a busy machine lost whole questions this way, unseen).

Not discards, because the words are kept: a turn merged into the next one (its words
begin it), words that arrive after their turn ended (they begin the next one), the
words of a call's last turn already transcribed (kept at close). And a VAD onset that the VAD then
drops (``SpeechFalseStart``) was no speech by its verdict.

Each discard is counted once: a muted transcript or a failed STT call inside a turn is
reported where it happens, and that turn ending with no words is then not reported
again. Why here and not at each decision: the decisions are spread over the VAD, the
mute strategies, the STT, the barge-in and the turn's end, and one ledger that watches
them all is where "every utterance is accounted for" can be read and tested.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pipeline.events import (
    Emitter,
    ServiceError,
    SpeechStarted,
    Transcription,
    UserSpeechDiscarded,
    UserTranscript,
    UserTurnDiscarded,
    UserTurnStarted,
)

REASONS = ("backchannel", "echo", "no_words", "muted", "stt_error", "call_ended")


class SpeechLedger:
    """One session's discards. It watches the conversation's ``events``; the session
    tells it what the conversation never sees (:meth:`muted_utterance`,
    :meth:`transcribed` while muted); ``verdict_reason`` reads why the barge-in last let
    the bot go on (:attr:`pipeline.interruptions.judge.InterruptionDecider.reason`)."""

    def __init__(
        self,
        events: Emitter,
        verdict_reason: Callable[[], str | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._emit = events.emit
        self._verdict_reason = verdict_reason
        self._clock = clock
        self._onset: float | None = None  # of the latest speech the conversation saw
        self._reported_in_turn = 0  # discards reported since the turn in progress began
        self.counts: dict[str, int] = dict.fromkeys(REASONS, 0)
        events.on(SpeechStarted, self._speech_started)
        events.on(UserTurnStarted, self._turn_started)
        events.on(UserTurnDiscarded, self._turn_discarded)
        events.on(UserTranscript, self._turn_ended)
        events.on(ServiceError, self._service_error)

    # -- what the session reports -------------------------------------------------------

    def muted_utterance(self, onset: float) -> None:
        """An utterance that began while the user was muted has ended (not transcribed)."""
        self._report("muted", "", onset)

    def call_ended(self, utterances: int) -> None:
        """The call ends with ``utterances`` still being recorded or transcribed."""
        for _ in range(utterances):
            self._report("call_ended", "", self._onset)

    def transcribed(self, event: Transcription, muted: bool) -> None:
        """A transcript is about to reach the conversation; while muted it drops it."""
        if muted and event.final and event.text.strip():
            self._report("muted", event.text.strip(), self._onset)

    # -- what the conversation reports --------------------------------------------------

    def _speech_started(self, event: SpeechStarted) -> None:
        self._onset = event.t

    def _turn_started(self, _event: UserTurnStarted) -> None:
        self._reported_in_turn = 0

    def _service_error(self, event: ServiceError) -> None:
        if event.service == "stt":
            self._report("stt_error", "", self._onset)

    def _turn_discarded(self, event: UserTurnDiscarded) -> None:
        """The barge-in let the bot go on: a backchannel, the echo, or no words."""
        reason = self._verdict_reason() or "backchannel"
        if reason == "no_words" and self._reported_in_turn:
            return  # the failed STT (or the mute) that left no words was reported
        self._report(reason, event.text, self._onset)

    def _turn_ended(self, event: UserTranscript) -> None:
        # A spoken turn with no words: typed turns always have some, and a turn's end
        # with words is a turn.
        if not event.content and not self._reported_in_turn:
            self._report("no_words", "", self._onset)

    def _report(self, reason: str, text: str, onset: float | None) -> None:
        self.counts[reason] += 1
        self._reported_in_turn += 1
        self._emit(UserSpeechDiscarded(self._clock(), reason, text, onset))
