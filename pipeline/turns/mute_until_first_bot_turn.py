"""Mute the user from the start until the bot has finished speaking once.

Pipecat's ``MuteUntilFirstBotCompleteUserMuteStrategy``: unlike
:class:`~pipeline.turns.mute_during_first_bot_speech.MuteDuringFirstBotSpeech` the user is
muted even before the bot starts, so the bot's opening always comes first, whole.
"""

from __future__ import annotations

from pipeline.events import BotStoppedSpeaking, Event
from pipeline.turns.mute import UserMuteStrategy


class MuteUntilFirstBotTurn(UserMuteStrategy):
    """Muted until the first ``BotStoppedSpeaking``."""

    def __init__(self) -> None:
        self._first_speech_done = False

    @property
    def muted(self) -> bool:
        return not self._first_speech_done

    def handle(self, event: Event) -> None:
        if isinstance(event, BotStoppedSpeaking):
            self._first_speech_done = True
