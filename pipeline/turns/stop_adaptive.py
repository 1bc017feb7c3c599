"""Stop the user's turn when audio, words and silence together say the user is done.

At each pause (the VAD's ``SpeechStopped``) three cues come in: the end-of-turn model's
probability that the turn is complete (:class:`~pipeline.events.TurnEndScore`, from the
turn's audio), how the transcript ends (:mod:`pipeline.turns.text_cues`) and the silence
so far. They set how long to wait, counted from the end of the speech:

=====================  ===================  =====================  ==================
words end              model sure: done     model unsure           model sure: not
=====================  ===================  =====================  ==================
a question             ``question_wait[0]``  in between             ``question_wait[1]``
a statement            ``statement_wait[0]`` in between             ``statement_wait[1]``
unfinished             ``max_wait``          ``max_wait``           ``max_wait``
=====================  ===================  =====================  ==================

"Sure: done" is a probability of at least ``confident``, "sure: not" at most
``doubtful``; in between the wait moves linearly from one to the other (the int8 model
swings by up to 0.5 on tiny input changes near its threshold, so a middling score means
"unsure", not "probably"). Unfinished words ("… a table for", "um", "the thing is")
always wait ``max_wait``, which also caps every other wait. The turn never ends before
its words are in (a final transcript of every utterance, possibly empty) nor while the
user speaks, nor while the VAD is confirming what may be speech. A short sound in the
pause that did not become speech (a false start: a faint word, a breath) restarts the
silence: the wait counts from it, still within ``max_wait`` of the end of speech. If
the model has not answered ``score_timeout`` seconds after the pause was seen, the rule
goes on without it, as if it had said ``no_score``.

Preemptive replies: ``lead`` seconds before the turn would end (but not before the words
are in) the strategy *predicts* the end (:meth:`pop_prediction`), so an answer can be
prepared, held, and played the moment the turn does end. ``lead`` is a callable: the
session passes its measured reply latency.

Early: at ``SpeechPausing`` (the first ~64 ms of silence, before the VAD's stop) the
words are asked on speculation, and the model once ~0.1 s is in (the scorer waits for
it, :mod:`pipeline.hearing.turn_scorer`); their answers come as an interim
transcription and a score for that speech end. If they already say "done" (a question,
a confident model: no wait), the end is predicted at once, so the held reply is being
made while the stop window runs out. The turn still ends no earlier than the stop: the
early cues only move the prediction (and the words and score are in at the stop). A
question is foreseen on its words alone if they come before the model's score.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.events import (
    Event,
    SpeechFalseStart,
    SpeechOnset,
    SpeechPausing,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    TurnEndScore,
)
from pipeline.turns.languages import canonical
from pipeline.turns.strategy import TurnContext, UserTurnStopStrategy
from pipeline.turns.text_cues import Ending, ending


@dataclass(frozen=True, slots=True)
class AdaptiveStopParams:
    """The adaptive turn-end rule's settings (see the module docstring)."""

    confident: float = 0.9
    doubtful: float = 0.3
    question_wait: tuple[float, float] = (0.0, 0.7)
    statement_wait: tuple[float, float] = (0.7, 1.2)
    max_wait: float = 2.0
    score_timeout: float = 0.35
    no_score: float = 0.5
    lead: float = 0.4  # default preemption lead, before the session has measured one
    # The words' language (ISO 639-1); a transcript the STT says is in another language
    # with cue words is read in that one (a caller who switches).
    language: str = "en"

    def __post_init__(self) -> None:
        if not 0.0 <= self.doubtful < self.confident <= 1.0:
            raise ValueError("need 0 <= doubtful < confident <= 1")
        for low, high in (self.question_wait, self.statement_wait):
            if not 0.0 <= low <= high:
                raise ValueError("waits must be 0 <= sure-done <= sure-not-done")
        if self.max_wait <= 0 or self.score_timeout < 0:
            raise ValueError("max_wait must be positive and score_timeout not negative")

    def wait(self, probability: float, words: Ending | None) -> float:
        """Seconds from the end of speech to the end of the turn for these cues."""
        if words is Ending.UNFINISHED:
            return self.max_wait
        low, high = self.question_wait if words is Ending.QUESTION else self.statement_wait
        doubt = (self.confident - probability) / (self.confident - self.doubtful)
        doubt = min(1.0, max(0.0, doubt))
        return min(self.max_wait, low + doubt * (high - low))


class AdaptiveTurnStop(UserTurnStopStrategy):
    """The turn ends ``params.wait(score, words)`` after the speech ended (see module)."""

    name = "adaptive"

    def __init__(
        self,
        params: AdaptiveStopParams | None = None,
        lead: Callable[[], float] | None = None,
    ) -> None:
        self.params = params or AdaptiveStopParams()
        self._lead = lead or (lambda: self.params.lead)
        self.reset()

    def reset(self) -> None:
        # The turn's words: every utterance's transcript (a question's form is in its
        # first words, which an earlier utterance may hold), and the latest one's language.
        self._text = ""
        self._language = self.params.language
        self._awaiting = 0  # utterances ended whose transcript has not come in yet
        self._pause: float | None = None  # when the speech of the current pause ended
        self._onset: float | None = None  # of the sound the VAD is confirming, if any
        self._quiet: float | None = None  # silence counts from here (a later false start)
        self._score: float | None = None
        self._score_due: float | None = None  # give up waiting for the score then
        self._end: float | None = None
        self._predict: float | None = None
        self._predicted = False  # the end of this pause was predicted already
        self._prediction = False  # ... and not yet popped
        self._early: float | None = None  # the speech end of a pause still in its window
        self._early_text = ""  # the speculative words of that pause
        self._early_score: float | None = None

    @property
    def deadline(self) -> float | None:
        if self._end is None:
            return self._score_due if self._words_in else None
        if self._predict is not None:
            return min(self._predict, self._end)
        return self._end

    @property
    def words(self) -> Ending | None:
        """How the turn's words end so far."""
        return ending(self._text, self._language)

    @property
    def _words_in(self) -> bool:
        return self._pause is not None and self._awaiting == 0

    def pop_prediction(self) -> bool:
        predicted, self._prediction = self._prediction, False
        return predicted

    def handle(self, event: Event, ctx: TurnContext) -> bool:
        step = _STEPS.get(type(event))
        return False if step is None else step(self, event, ctx)

    def _on_onset(self, event: SpeechOnset, ctx: TurnContext) -> bool:
        self._onset = event.t
        return self._decide(ctx)

    def _on_false_start(self, event: SpeechFalseStart, ctx: TurnContext) -> bool:
        if self._pause is not None and self._onset is not None:
            self._quiet = self._onset  # a short sound in the pause: still there
        return self._decide(ctx)

    def _on_started(self, event: SpeechStarted, ctx: TurnContext) -> bool:
        self._pause = self._score = self._score_due = self._quiet = None
        self._end = self._predict = self._early = None
        self._predicted = False
        return self._decide(ctx)

    def _on_pausing(self, event: SpeechPausing, ctx: TurnContext) -> bool:
        self._early, self._early_text, self._early_score = event.t, "", None
        return False

    def _on_stopped(self, event: SpeechStopped, ctx: TurnContext) -> bool:
        early = self._early_score if event.t == self._early else None
        self._pause, self._quiet, self._score = event.t, event.t, early
        self._score_due = ctx.now + self.params.score_timeout
        self._awaiting += 1
        self._predicted = False
        self._early = None
        return self._decide(ctx)

    def _on_words(self, event: Transcription, ctx: TurnContext) -> bool:
        if not event.final:
            if self._early is not None and event.text.strip():
                self._early_text = event.text.strip()
                self._foresee(ctx, event.language)
            return False
        self._awaiting = max(0, self._awaiting - 1)
        if event.text.strip():
            self._text = f"{self._text} {event.text.strip()}".lstrip()
            self._language = canonical(event.language) or self.params.language
        if self._pause is None and not ctx.user_speaking:
            # Words with no pause seen: the turn began at them (a min-words start) or the
            # STT has no VAD. Count the silence from them.
            self._pause = self._quiet = event.t
            self._score_due = ctx.now + self.params.score_timeout
        return self._decide(ctx)

    def _on_score(self, event: TurnEndScore, ctx: TurnContext) -> bool:
        if event.speech_end == self._early:
            self._early_score = event.probability
            self._foresee(ctx, None)
            return False
        if event.speech_end != self._pause:
            return False  # a score of an earlier pause: the user spoke since
        self._score = event.probability
        return self._decide(ctx)

    def _foresee(self, ctx: TurnContext, language: str | None) -> None:
        """Predict the end at a pause still in the VAD's window, if its speculative words
        and score leave no wait (see the module docstring)."""
        if self._early is None or not self._early_text:
            return
        if self._predicted or ctx.user_starting:
            return
        text = f"{self._text} {self._early_text}".lstrip()  # the whole turn, as at the stop
        words = ending(text, canonical(language) or self._language)
        # Before the model answers, the words alone: a question never waits long (at most
        # question_wait[1]), and a reply started on it is only held, not played.
        probability = 1.0 if self._early_score is None else self._early_score
        if self._early + self.params.wait(probability, words) - self._lead() <= ctx.now:
            self._predicted = self._prediction = True

    def on_timer(self, ctx: TurnContext) -> bool:
        return self._decide(ctx)

    def _decide(self, ctx: TurnContext) -> bool:
        self._end = self._predict = None
        if self._score_due is not None and ctx.now >= self._score_due:
            self._score_due = None  # the model is late: decide without it
        if not self._words_in or ctx.user_speaking or ctx.user_starting:
            return False  # asked again when the words come, or at a false start
        if self._score is None and self._score_due is not None:
            return False  # the model may still answer
        assert self._pause is not None and self._quiet is not None
        probability = self.params.no_score if self._score is None else self._score
        wait = self.params.wait(probability, self.words)
        end = min(self._quiet + wait, self._pause + self.params.max_wait)
        if ctx.now >= end:
            return True
        self._end = end
        if not self._predicted:
            predict = end - max(0.0, self._lead())
            if predict > ctx.now:
                self._predict = predict
            else:  # once per pause: a new pause starts a new decision
                self._predicted = self._prediction = True
        return False

    def __repr__(self) -> str:
        return f"AdaptiveTurnStop({self.params})"


# What each event does to the rule (any other event: nothing).
_STEPS: dict[type[Event], Callable[[AdaptiveTurnStop, Any, TurnContext], bool]] = {
    SpeechOnset: AdaptiveTurnStop._on_onset,
    SpeechFalseStart: AdaptiveTurnStop._on_false_start,
    SpeechStarted: AdaptiveTurnStop._on_started,
    SpeechPausing: AdaptiveTurnStop._on_pausing,
    SpeechStopped: AdaptiveTurnStop._on_stopped,
    Transcription: AdaptiveTurnStop._on_words,
    TurnEndScore: AdaptiveTurnStop._on_score,
}
