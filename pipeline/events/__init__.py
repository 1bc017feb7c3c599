"""The few event types that move through a session, and the emitter that delivers them.

Every event is a small frozen dataclass. Times (``t``) are seconds on the session's
clock (``time.monotonic()`` in production, any scripted number in tests). Events are
facts that already happened; they are delivered synchronously, in order, to whoever
subscribed (see :class:`Emitter`). Audio does not travel as events: 20 ms frames are
handed straight from the transport to the VAD, and bot audio straight to the outbound
track, so nothing queues behind a control event.

The types are grouped by who produces them: :mod:`~pipeline.events.user` (speech, its
transcription and the user's turns), :mod:`~pipeline.events.bot` (playout, the LLM, TTS),
:mod:`~pipeline.events.calls` (function calls), :mod:`~pipeline.events.reports` (what the
aggregators and services report); :mod:`~pipeline.events.event` holds the base class and
the emitter. Import them from here: ``from pipeline.events import SpeechStarted``.
"""

from __future__ import annotations

from pipeline.events.bot import (
    BotPaused,
    BotResumed,
    BotStartedSpeaking,
    BotStoppedSpeaking,
    BotText,
    BotTextProgress,
    BotTextStarted,
    Interruption,
    LLMMarker,
    LLMResponseEnded,
    LLMResponseStarted,
    LLMText,
    LLMThoughtEnded,
    LLMThoughtStarted,
    LLMThoughtText,
    PreemptiveReplyEnded,
    TTSStarted,
    TTSStopped,
    UserTurnMerged,
)
from pipeline.events.calls import (
    AppMessage,
    FunctionCall,
    FunctionCallCancelled,
    FunctionCallInProgress,
    FunctionCallResult,
    FunctionCallsStarted,
)
from pipeline.events.event import (
    Emitter,
    Event,
)
from pipeline.events.reports import (
    AssistantThought,
    AssistantTranscript,
    AssistantTurnStarted,
    BotResponseEnded,
    LLMRunRequested,
    Metric,
    ServiceError,
    SummaryAppliedEvent,
    SummaryRequested,
    UserTranscript,
)
from pipeline.events.user import (
    AudioIdle,
    SpeechFalseStart,
    SpeechOnset,
    SpeechPausing,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    TurnEndScore,
    UserIdle,
    UserMuteStarted,
    UserMuteStopped,
    UserSpeechDiscarded,
    UserTurnDiscarded,
    UserTurnEndPredicted,
    UserTurnStarted,
    UserTurnStopped,
    UserTurnStopTimeout,
)

__all__ = [
    "AppMessage",
    "AssistantThought",
    "AssistantTranscript",
    "AssistantTurnStarted",
    "AudioIdle",
    "BotPaused",
    "BotResponseEnded",
    "BotResumed",
    "BotStartedSpeaking",
    "BotStoppedSpeaking",
    "BotText",
    "BotTextProgress",
    "BotTextStarted",
    "Emitter",
    "Event",
    "FunctionCall",
    "FunctionCallCancelled",
    "FunctionCallInProgress",
    "FunctionCallResult",
    "FunctionCallsStarted",
    "Interruption",
    "LLMMarker",
    "LLMResponseEnded",
    "LLMResponseStarted",
    "LLMRunRequested",
    "LLMText",
    "LLMThoughtEnded",
    "LLMThoughtStarted",
    "LLMThoughtText",
    "Metric",
    "PreemptiveReplyEnded",
    "ServiceError",
    "SpeechFalseStart",
    "SpeechOnset",
    "SpeechPausing",
    "SpeechStarted",
    "SpeechStopped",
    "SummaryAppliedEvent",
    "SummaryRequested",
    "TTSStarted",
    "TTSStopped",
    "Transcription",
    "TurnEndScore",
    "UserIdle",
    "UserMuteStarted",
    "UserMuteStopped",
    "UserSpeechDiscarded",
    "UserTranscript",
    "UserTurnDiscarded",
    "UserTurnEndPredicted",
    "UserTurnMerged",
    "UserTurnStarted",
    "UserTurnStopTimeout",
    "UserTurnStopped",
]
