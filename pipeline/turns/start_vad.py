"""Start the user's turn the moment the VAD hears speech."""

from __future__ import annotations

from pipeline.events import Event, SpeechStarted
from pipeline.turns.strategy import TurnContext, UserTurnStartStrategy


class VADTurnStart(UserTurnStartStrategy):
    """A turn starts at ``SpeechStarted``."""

    name = "vad"

    def handle(self, event: Event, ctx: TurnContext) -> bool:
        return isinstance(event, SpeechStarted)
