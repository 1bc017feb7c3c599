"""Stop the user's turn after a pause long enough that they are probably done.

Pipecat's ``SpeechTimeoutUserTurnStopStrategy`` rule (with no STT latency timer):

- ``SpeechStopped`` (re)starts a ``user_speech_timeout`` timer: the window in which the
  user may go on. ``SpeechStarted`` cancels it.
- When it expires, the turn stops if a transcript has arrived during the turn; if none
  has, the first final transcript after that stops the turn at once.
- A transcript in a turn with no VAD stop while the user is not speaking (text-only STT,
  or a turn started by its own transcript after the VAD stop) restarts the timer: then it
  measures quiet since the last transcript.

The timer starts when the strategy learns of the stop (the controller's now), not at the
speech end in ``SpeechStopped.t``: the VAD's own stop window has already passed by then.
"""

from __future__ import annotations

from pipeline.events import Event, SpeechStarted, SpeechStopped, Transcription
from pipeline.turns.strategy import TurnContext, UserTurnStopStrategy

DEFAULT_USER_SPEECH_TIMEOUT = 0.6  # Pipecat's default


class SpeechTimeoutTurnStop(UserTurnStopStrategy):
    """Stop ``user_speech_timeout`` seconds after the user went quiet, once there is text."""

    name = "speech_timeout"

    def __init__(
        self,
        *,
        user_speech_timeout: float = DEFAULT_USER_SPEECH_TIMEOUT,
        wait_for_transcript: bool = True,
    ) -> None:
        if user_speech_timeout < 0:
            raise ValueError("user_speech_timeout must not be negative")
        self.user_speech_timeout = user_speech_timeout
        # False: VAD alone ends the turn (e.g. a speech-to-speech model consumes the audio).
        self.wait_for_transcript = wait_for_transcript
        self._deadline: float | None = None
        self._waited = False  # the pause timer ran out and nothing resumed since
        self._vad_stopped = False  # a SpeechStopped arrived during this turn
        self._text = False  # a final transcript arrived during this turn

    @property
    def deadline(self) -> float | None:
        return self._deadline

    def reset(self) -> None:
        self._deadline = None
        self._waited = False
        self._vad_stopped = False
        self._text = False

    def handle(self, event: Event, ctx: TurnContext) -> bool:
        if isinstance(event, SpeechStarted):
            self._deadline = None
            self._waited = False
            self._vad_stopped = False
        elif isinstance(event, SpeechStopped):
            self._vad_stopped = True
            self._restart_timer(ctx)
        elif isinstance(event, Transcription) and event.final and event.text.strip():
            self._text = True
            if self._waited:
                return self._ready(ctx)
            if not ctx.user_speaking and not self._vad_stopped:
                self._restart_timer(ctx)
        return False

    def on_timer(self, ctx: TurnContext) -> bool:
        self._deadline = None
        self._waited = True
        return self._ready(ctx)

    def _restart_timer(self, ctx: TurnContext) -> None:
        self._waited = False
        self._deadline = ctx.now + self.user_speech_timeout

    def _ready(self, ctx: TurnContext) -> bool:
        has_text = self._text or not self.wait_for_transcript
        return self._waited and has_text and not ctx.user_speaking

    def __repr__(self) -> str:
        return f"SpeechTimeoutTurnStop(user_speech_timeout={self.user_speech_timeout})"
