"""Mute the user whenever the bot speaks (Pipecat's ``AlwaysUserMuteStrategy``)."""

from __future__ import annotations

from pipeline.events import BotStartedSpeaking, BotStoppedSpeaking, Event
from pipeline.turns.mute import UserMuteStrategy


class MuteWhileBotSpeaks(UserMuteStrategy):
    """Muted from every ``BotStartedSpeaking`` to the next ``BotStoppedSpeaking``."""

    def __init__(self) -> None:
        self._bot_speaking = False

    @property
    def muted(self) -> bool:
        return self._bot_speaking

    def handle(self, event: Event) -> None:
        if isinstance(event, BotStartedSpeaking):
            self._bot_speaking = True
        elif isinstance(event, BotStoppedSpeaking):
            self._bot_speaking = False
