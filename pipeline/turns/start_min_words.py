"""Start the user's turn over the bot only once the user has said enough words.

While the bot speaks, "mhm" or "yeah" is a backchannel, not a request to take the floor:
the turn (and its interruption) waits until the user's words since they last started
speaking reach ``min_words``. While the bot is silent there is nothing to protect, so the
turn starts at ``SpeechStarted`` like :class:`~pipeline.turns.start_vad.VADTurnStart` (or at
the first word, when no VAD event came).
"""

from __future__ import annotations

from pipeline.events import (
    BotStartedSpeaking,
    BotStoppedSpeaking,
    Event,
    SpeechStarted,
    Transcription,
)
from pipeline.turns.strategy import TurnContext, UserTurnStartStrategy


class MinWordsTurnStart(UserTurnStartStrategy):
    """While the bot speaks, start a turn only at ``min_words`` transcribed words."""

    name = "min_words"

    def __init__(
        self, *, min_words: int, use_interim: bool = True, enable_interruptions: bool = True
    ) -> None:
        if min_words < 1:
            raise ValueError("min_words must be at least 1")
        super().__init__(enable_interruptions=enable_interruptions)
        self.min_words = min_words
        self.use_interim = use_interim
        self._final_words = 0  # words in final transcripts of the current utterance
        self._interim_words = 0  # words in the latest interim (it restates the pending text)

    @property
    def words(self) -> int:
        """Words heard since the user last started speaking (or the bot started/stopped)."""
        return self._final_words + self._interim_words

    def reset(self) -> None:
        self._final_words = 0
        self._interim_words = 0

    def handle(self, event: Event, ctx: TurnContext) -> bool:
        if isinstance(event, (BotStartedSpeaking, BotStoppedSpeaking)):
            # Backchannels said during an earlier bot utterance do not add up to a turn now.
            self.reset()
            return False
        if isinstance(event, SpeechStarted):
            self.reset()
            return not ctx.bot_speaking
        if isinstance(event, Transcription):
            return self._count(event) >= (self.min_words if ctx.bot_speaking else 1)
        return False

    def _count(self, event: Transcription) -> int:
        words = len(event.text.split())
        if event.final:
            self._final_words += words
            self._interim_words = 0
        elif self.use_interim:
            self._interim_words = words
        return self.words

    def __repr__(self) -> str:
        return f"MinWordsTurnStart(min_words={self.min_words})"
