"""Barge-in, paused first: the bot goes silent at the user's voice, then either stops for
good or goes on where it was.

:class:`BargeIn` owns the pause: it silences the output (the unplayed audio kept, the
reply still generating), hands the speech to an
:class:`~pipeline.interruptions.InterruptionDecider`, and carries out its verdict
through the conversation's callbacks: ``interrupt(t)`` (cancel as any barge-in) or
``dismiss(t, text)`` (the speech was no turn; the reply resumes from the sample where
it paused). It reports :class:`~pipeline.frames.BotPaused` and
:class:`~pipeline.frames.BotResumed` through ``emit``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

from pipeline.frames import BotPaused, BotResumed, Event, Transcription
from pipeline.interruptions import InterruptionDecider, InterruptionParams, Verdict

# The bot's words the echo check compares against: the sentences it played lately.
_RECENT_SEGMENTS = 3


class Pausable(Protocol):
    playing: bool
    paused: bool

    def pause(self) -> None: ...

    def resume(self) -> None: ...


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
    ) -> None:
        self.output = output
        self.enabled = enabled and output is not None
        self.decider = InterruptionDecider(params)
        self._interrupt = interrupt
        self._dismiss = dismiss
        self._emit = emit
        self._recent: deque[str] = deque(maxlen=_RECENT_SEGMENTS)

    @property
    def pending(self) -> bool:
        return self.decider.pending

    def pause(self, onset: float, t: float, mid_reply: bool = False) -> bool:
        """The user's voice over the bot: pause and judge (True), or not pausable (False:
        the caller interrupts at once, e.g. when no audio plays yet). ``mid_reply``: the
        reply has been heard already, and the output only ran dry for a moment (TTS
        slower than playout); the echo of its last words still counts as the bot's."""
        output = self.output
        if not self.enabled or output is None or output.paused:
            return False
        if not (output.playing or mid_reply):
            return False
        output.pause()
        self.decider.bot_words = " ".join(self._recent)
        self.decider.start(onset)
        self._emit(BotPaused(t))
        return True

    def handle(self, event: Event) -> Verdict | None:
        """A VAD event or transcript while paused; carries out the verdict if one comes."""
        verdict = self.decider.handle(event)
        if verdict is not None:
            self._carry_out(verdict, getattr(event, "t", 0.0), event)
        return verdict

    def advance(self, now: float) -> None:
        verdict = self.decider.advance(now)
        if verdict is not None:
            self._carry_out(verdict, now, None)

    def played(self, text: str) -> None:
        """A sentence of the bot began to play (for the echo check)."""
        self._recent.append(text)

    def cancel(self) -> None:
        """The reply ended some other way (typed text, the session closing)."""
        self.decider.pending = False

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
