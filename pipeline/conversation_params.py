"""What shapes one :class:`~pipeline.conversation.Conversation` beyond its services: turn-taking,
turn completion, barge-in, preemptive replies, merging and the prices of its metrics.

Two things make a wrong guess about the end of the user's turn cheap:

- Preemptive replies (``preemptive``): when the turn logic foresees the end of the turn,
  the answer starts at once, held (:mod:`pipeline.reply.preemptive`); it plays when the turn
  ends, or is dropped unseen if the user goes on.
- Merging (``merge_window``): if the user speaks again within ``merge_window`` seconds
  of the end of a turn that is being answered, the answer is cut off as in a barge-in,
  and the turn with the start of its answer is taken back (:mod:`pipeline.turns.merge`):
  its words begin the turn in progress.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pipeline.interruptions.barge_in import OnsetPause
from pipeline.interruptions.judge import InterruptionParams
from pipeline.reply.bot_turn import DEFAULT_TTS_AHEAD
from pipeline.reply.turn_completion import TurnCompletionConfig
from pipeline.session_metrics import Prices
from pipeline.turns import UserTurnParams
from pipeline.turns.mute import UserMuteStrategy


@dataclass(frozen=True)
class ConversationParams:
    """The conversation's settings. ``preemptive`` needs an output and a TTS;
    ``merge_window`` 0 never merges; ``tts_ahead`` is how many seconds of speech are
    synthesized ahead of playout at most."""

    turn_params: UserTurnParams | None = None
    mute_strategies: Sequence[UserMuteStrategy] = ()
    filter_incomplete_user_turns: bool = False
    turn_completion: TurnCompletionConfig = field(default_factory=TurnCompletionConfig)
    prices: Prices | None = None
    preemptive: bool = True
    merge_window: float = 0.0
    interruptions: InterruptionParams | None = None
    pause_on_interruption: bool = True
    tts_ahead: float = DEFAULT_TTS_AHEAD
    pause_at_onset: OnsetPause = "auto"
