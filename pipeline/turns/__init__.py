"""User turn-taking: who has the floor, when the user is done, muting and idle detection.

Pure, clock-free state machines: each takes events through ``handle(event)`` and time
through ``advance(t)``, and reports through an ``emit`` callback. :class:`UserTurns` wires
them together for a session.
"""

from pipeline.turns.controller import TIMEOUT_STRATEGY, UserTurnController
from pipeline.turns.idle import UserIdleController
from pipeline.turns.mute import USER_EVENTS, UserMute, UserMuteStrategy
from pipeline.turns.mute_during_first_bot_speech import MuteDuringFirstBotSpeech
from pipeline.turns.mute_during_function_calls import MuteDuringFunctionCalls
from pipeline.turns.mute_until_first_bot_turn import MuteUntilFirstBotTurn
from pipeline.turns.mute_while_bot_speaks import MuteWhileBotSpeaks
from pipeline.turns.params import UserTurnParams
from pipeline.turns.start_min_words import MinWordsTurnStart
from pipeline.turns.start_transcription import TranscriptionTurnStart
from pipeline.turns.start_vad import VADTurnStart
from pipeline.turns.stop_silence_and_transcript import SilenceAndTranscriptTurnStop
from pipeline.turns.stop_speech_timeout import SpeechTimeoutTurnStop
from pipeline.turns.strategy import TurnContext, UserTurnStartStrategy, UserTurnStopStrategy
from pipeline.turns.user_turns import UserTurns

__all__ = [
    "TIMEOUT_STRATEGY",
    "USER_EVENTS",
    "MinWordsTurnStart",
    "MuteDuringFirstBotSpeech",
    "MuteDuringFunctionCalls",
    "MuteUntilFirstBotTurn",
    "MuteWhileBotSpeaks",
    "SilenceAndTranscriptTurnStop",
    "SpeechTimeoutTurnStop",
    "TranscriptionTurnStart",
    "TurnContext",
    "UserIdleController",
    "UserMute",
    "UserMuteStrategy",
    "UserTurnController",
    "UserTurnParams",
    "UserTurnStartStrategy",
    "UserTurnStopStrategy",
    "UserTurns",
    "VADTurnStart",
]
