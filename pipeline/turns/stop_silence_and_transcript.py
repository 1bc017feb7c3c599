"""Stop the user's turn once the user is silent and their words are transcribed.

The turn stops as soon as both hold, whichever comes last: the VAD says the user is
silent (it reported ``SpeechStopped``, or never reported speech, as with text-only STT)
and a final transcript has arrived during this turn. An interim transcript after the
final one means more text is on its way, so it waits for the next final.
"""

from __future__ import annotations

from pipeline.events import Event, SpeechStarted, SpeechStopped, Transcription
from pipeline.turns.strategy import TurnContext, UserTurnStopStrategy


class SilenceAndTranscriptTurnStop(UserTurnStopStrategy):
    """Stop at VAD silence plus a final transcript, in either order, with no delay."""

    name = "silence_and_transcript"

    def __init__(self) -> None:
        self._final_text = False

    def reset(self) -> None:
        self._final_text = False

    def handle(self, event: Event, ctx: TurnContext) -> bool:
        if isinstance(event, Transcription) and event.text.strip():
            self._final_text = event.final
        elif not isinstance(event, (SpeechStarted, SpeechStopped)):
            return False
        return self._final_text and not ctx.user_speaking
