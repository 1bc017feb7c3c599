"""Barge-in, paused first: the bot goes silent at the user's voice, then either stops for
good or goes on where it was.

:class:`BargeIn` owns the pause: it silences the output (the unplayed audio kept, the
reply still generating), hands the speech to an
:class:`~pipeline.interruptions.judge.InterruptionDecider`, and carries out its verdict
through the conversation's callbacks: ``interrupt(t)`` (cancel as any barge-in) or
``dismiss(t, text)`` (the speech was no turn; the reply resumes from the sample where
it paused). It reports :class:`~pipeline.events.BotPaused` and
:class:`~pipeline.events.BotResumed` through ``emit``.

With ``at_onset`` the pause comes earlier: at the VAD's first speech window
(``SpeechOnset``, :meth:`BargeIn.onset`) instead of its confirmation ``start_secs``
later, which was most of a barge-in's latency. Until the VAD confirms, the pause is only
*held*: a false start (:meth:`BargeIn.false_start`) resumes at once, and the
confirmation (:meth:`BargeIn.pause`) makes it an ordinary pause, judged as before. Silero
scores coughs, breaths and clicks far below its threshold, but what AEC3 leaves of a loud
echo crosses it for a window or two now and then (``bench/barge_in_latency.py``: 19 pauses
in 675 s of echo at the onset, 9 at the confirmation). So ``"auto"`` pauses at the onset only
once the echo canceller has ruled out an echo path (``echo_possible``: a browser that
cancels its own echo, the common case), and at the confirmation while the bot's voice
comes back or may (a speakerphone; the first second of a call).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Literal, Protocol

from pipeline.events import BotPaused, BotResumed, Event, Transcription
from pipeline.interruptions.judge import InterruptionDecider, InterruptionParams, Verdict
from pipeline.reply.playout_pacing import AudioOutput

# The bot's words the echo check compares against: the sentences it played lately.
_RECENT_SEGMENTS = 3
# A pause held for an onset the VAD neither confirms nor drops (its probability hovering
# just under the threshold) ends after this long: far past a confirmation (0.2 s, a few
# windows of dips allowed), and the bot must not stay silent for what is not speech.
ONSET_HOLD_LIMIT = 0.6

# When the bot pauses at an onset: with no echo path ("auto"), always ("on"), never ("off").
OnsetPause = Literal["auto", "on", "off"]


class Pausable(Protocol):
    @property
    def playing(self) -> bool: ...

    @property
    def paused(self) -> bool: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class PausableOutput(AudioOutput, Pausable, Protocol):
    """The paced track: audio out that a barge-in pauses."""


class BargeIn:
    """One session's barge-ins: pause, judge, then interrupt or resume."""

    def __init__(
        self,
        output: Pausable | None,
        interrupt: Callable[[float], None],
        dismiss: Callable[[float, str], None],
        emit: Callable[[Event], None],
        params: InterruptionParams | None = None,
        enabled: bool = True,
        at_onset: OnsetPause = "auto",
    ) -> None:
        self.output = output
        self.enabled = enabled and output is not None
        self.at_onset = at_onset
        self.decider = InterruptionDecider(params)
        self._interrupt = interrupt
        self._dismiss = dismiss
        self._emit = emit
        self._recent: deque[str] = deque(maxlen=_RECENT_SEGMENTS)
        self._held: float | None = None  # the onset of a pause not yet confirmed
        # Whether the bot's voice can come back at all; the session sets it from its echo
        # canceller. When it cannot, words the bot just said are the user's (a caller
        # asking "can you…" after "how can I help you?"), never its echo; and an onset is
        # a sound in the room, not what AEC3 left of the echo ("auto" pauses at it).
        self.echo_possible: Callable[[], bool] = lambda: True

    @property
    def pending(self) -> bool:
        return self.decider.pending

    @property
    def held(self) -> bool:
        """Paused at an onset the VAD has not confirmed yet."""
        return self._held is not None

    def onset(self, t: float, mid_reply: bool = False) -> bool:
        """What may be the user's voice over the bot, at ``t``: pause now and hold the
        pause until the VAD confirms it (:meth:`pause`) or drops it (:meth:`false_start`).
        The caller checks that a confirmation would barge in (not muted, no turn going
        on); ``mid_reply`` as for :meth:`pause`."""
        if self.at_onset == "off" or (self.at_onset == "auto" and self.echo_possible()):
            return False  # an onset may be what AEC3 left of the bot's echo: confirm first
        if self.pending or self.held or not self._silence(mid_reply):
            return False
        self._held = t
        self._emit(BotPaused(t))
        return True

    def false_start(self, t: float) -> None:
        """What paused the bot at its onset was not speech (or no turn came of it): the
        reply goes on at once, from where it paused."""
        if self._held is None:
            return
        self._held = None
        if self.output is not None:
            self.output.resume()
        self._emit(BotResumed(t, unconfirmed=True))

    def pause(self, onset: float, t: float, mid_reply: bool = False) -> bool:
        """The user's voice over the bot: pause and judge (True), or not pausable (False:
        the caller interrupts at once, e.g. when no audio plays yet). ``mid_reply``: the
        reply has been heard already, and the output only ran dry for a moment (TTS
        slower than playout); the echo of its last words still counts as the bot's. A
        pause held since the onset goes on, judged from now (one ``BotPaused`` in all)."""
        confirmed = self.held
        self._held = None
        if not (confirmed or self._silence(mid_reply)):
            return False
        self.decider.bot_words = " ".join(self._recent) if self.echo_possible() else ""
        self.decider.start(onset)
        if not confirmed:
            self._emit(BotPaused(t))
        return True

    def _silence(self, mid_reply: bool) -> bool:
        """Pause the output if there is a reply to pause; False if there is none."""
        output = self.output
        if not self.enabled or output is None or output.paused:
            return False
        if not (output.playing or mid_reply):
            return False
        output.pause()
        return True

    def handle(self, event: Event) -> Verdict | None:
        """A VAD event or transcript while paused; carries out the verdict if one comes."""
        verdict = self.decider.handle(event)
        if verdict is not None:
            self._carry_out(verdict, getattr(event, "t", 0.0), event)
        return verdict

    def advance(self, now: float) -> None:
        """Time passes: a held pause past its limit, or the decider's deadlines."""
        if self._held is not None and now >= self._held + ONSET_HOLD_LIMIT:
            self.false_start(now)
        verdict = self.decider.advance(now)
        if verdict is not None:
            self._carry_out(verdict, now, None)

    def played(self, text: str) -> None:
        """A sentence of the bot began to play (for the echo check)."""
        self._recent.append(text)

    def cancel(self) -> None:
        """The reply ended some other way (typed text, the session closing)."""
        self.decider.pending = False
        self._held = None  # the output was flushed: nothing left to resume

    def _carry_out(self, verdict: Verdict, t: float, event: Event | None) -> None:
        if verdict is Verdict.INTERRUPT:
            self._emit(BotResumed(t, interrupted=True))
            self._interrupt(t)
            return
        if self.output is not None:
            self.output.resume()
        self._emit(BotResumed(t))
        text = self.decider.heard
        if isinstance(event, Transcription) and event.text.strip() and not text:
            text = event.text.strip()
        self._dismiss(t, text)
