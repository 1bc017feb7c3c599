"""The mute strategies by the names settings use (``PARLEY_USER_MUTE``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from pipeline.turns.mute import UserMuteStrategy
from pipeline.turns.mute_during_first_bot_speech import MuteDuringFirstBotSpeech
from pipeline.turns.mute_during_function_calls import MuteDuringFunctionCalls
from pipeline.turns.mute_until_first_bot_turn import MuteUntilFirstBotTurn
from pipeline.turns.mute_while_bot_speaks import MuteWhileBotSpeaks

MuteName = Literal["first_bot_speech", "until_first_bot_turn", "bot_speaking", "function_calls"]

_FACTORIES: dict[str, Callable[[], UserMuteStrategy]] = {
    "first_bot_speech": MuteDuringFirstBotSpeech,
    "until_first_bot_turn": MuteUntilFirstBotTurn,
    "bot_speaking": MuteWhileBotSpeaks,
    "function_calls": MuteDuringFunctionCalls,
}


def mute_strategies(names: Iterable[str]) -> list[UserMuteStrategy]:
    """New strategies (they keep per-session state) for ``names``, repeats ignored."""
    unknown = sorted(set(names) - _FACTORIES.keys())
    if unknown:
        raise ValueError(f"unknown mute strategies {unknown}; known: {sorted(_FACTORIES)}")
    return [_FACTORIES[name]() for name in dict.fromkeys(names)]
