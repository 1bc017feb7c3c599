"""Mute the user during the bot's first speech only (Pipecat's ``FirstSpeechUserMuteStrategy``).

The user may talk before the bot first speaks, and freely after; only the greeting (or
whatever the bot says first) cannot be interrupted.
"""

from __future__ import annotations

from pipeline.events import BotStartedSpeaking, BotStoppedSpeaking, Event
from pipeline.turns.mute import UserMuteStrategy


class MuteDuringFirstBotSpeech(UserMuteStrategy):
    """Muted from the first ``BotStartedSpeaking`` to the first ``BotStoppedSpeaking``."""

    def __init__(self) -> None:
        self._bot_speaking = False
        self._first_speech_done = False

    @property
    def muted(self) -> bool:
        return self._bot_speaking and not self._first_speech_done

    def handle(self, event: Event) -> None:
        if isinstance(event, BotStartedSpeaking):
            self._bot_speaking = True
        elif isinstance(event, BotStoppedSpeaking):
            self._bot_speaking = False
            self._first_speech_done = True
