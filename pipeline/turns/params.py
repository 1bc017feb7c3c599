"""Turn-taking settings with their defaults in one place, and the strategies they imply."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from pipeline.turns.controller import DEFAULT_USER_TURN_STOP_TIMEOUT
from pipeline.turns.start_min_words import MinWordsTurnStart
from pipeline.turns.start_transcription import TranscriptionTurnStart
from pipeline.turns.start_vad import VADTurnStart
from pipeline.turns.stop_adaptive import AdaptiveStopParams, AdaptiveTurnStop
from pipeline.turns.stop_speech_timeout import DEFAULT_USER_SPEECH_TIMEOUT, SpeechTimeoutTurnStop
from pipeline.turns.strategy import UserTurnStartStrategy, UserTurnStopStrategy


@dataclass(frozen=True, slots=True)
class UserTurnParams:
    """How user turns start, stop and time out.

    - ``user_turn_stop_timeout``: end a turn no stop strategy ended after this many
      seconds of silence and no new transcript.
    - ``user_speech_timeout``: pause after which the user is taken to be done.
    - ``min_words``: above 1, the user must say this many words to take the floor while
      the bot speaks (backchannels do not interrupt); 0 or 1: any speech does.
    - ``user_idle_timeout``: emit ``UserIdle`` after this long without a user turn once
      the bot stopped speaking; 0 turns it off.
    - ``enable_interruptions``: whether a user turn asks to cut the bot off.
    - ``turn_end``: ``"adaptive"`` ends the turn when the end-of-turn model, the words and
      the silence agree (:class:`AdaptiveTurnStop`, tuned by ``adaptive``);
      ``"fixed"`` waits ``user_speech_timeout`` after every pause.
    """

    user_turn_stop_timeout: float = DEFAULT_USER_TURN_STOP_TIMEOUT
    user_speech_timeout: float = DEFAULT_USER_SPEECH_TIMEOUT
    min_words: int = 0
    user_idle_timeout: float = 0.0
    enable_interruptions: bool = True
    turn_end: Literal["adaptive", "fixed"] = "fixed"
    adaptive: AdaptiveStopParams = field(default_factory=AdaptiveStopParams)

    def start_strategies(self) -> list[UserTurnStartStrategy]:
        """VAD then transcription (Pipecat's defaults), or min-words when set.

        Min-words replaces both: it already starts at the VAD while the bot is silent and
        at the first word without a VAD, and a plain transcription start would let a
        backchannel through.
        """
        interrupt = self.enable_interruptions
        if self.min_words > 1:
            return [MinWordsTurnStart(min_words=self.min_words, enable_interruptions=interrupt)]
        return [
            VADTurnStart(enable_interruptions=interrupt),
            TranscriptionTurnStart(enable_interruptions=interrupt),
        ]

    def stop_strategies(
        self, lead: Callable[[], float] | None = None
    ) -> list[UserTurnStopStrategy]:
        """The adaptive rule, or the fixed speech timeout. ``lead``: how long before the
        turn's end an answer should start, held (the session's reply latency)."""
        if self.turn_end == "adaptive":
            return [AdaptiveTurnStop(self.adaptive, lead)]
        return [SpeechTimeoutTurnStop(user_speech_timeout=self.user_speech_timeout)]
