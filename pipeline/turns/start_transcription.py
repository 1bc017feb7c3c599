"""Start the user's turn when text arrives that no VAD event announced.

The fallback for speech the VAD missed (a soft voice) and for text-only STT. The
controller asks start strategies only while no turn is active, so a transcript inside a
VAD-started turn never reaches this.
"""

from __future__ import annotations

from pipeline.events import Event, Transcription
from pipeline.turns.strategy import TurnContext, UserTurnStartStrategy


class TranscriptionTurnStart(UserTurnStartStrategy):
    """A turn starts at a non-empty ``Transcription`` (interim ones too, unless disabled)."""

    name = "transcription"

    def __init__(self, *, use_interim: bool = True, enable_interruptions: bool = True) -> None:
        super().__init__(enable_interruptions=enable_interruptions)
        self.use_interim = use_interim

    def handle(self, event: Event, ctx: TurnContext) -> bool:
        if not isinstance(event, Transcription) or not event.text.strip():
            return False
        return event.final or self.use_interim
