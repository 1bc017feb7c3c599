"""The idle user: the client told, the LLM checking in, the call ended after the last
unanswered check-in, the count started again by the user's words."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.context.llm_context import LLMContext
from pipeline.conversation import Conversation
from pipeline.events import AppMessage, BotStoppedSpeaking, UserIdle, UserTranscript
from pipeline.turns.idle_check_ins import END_REASON, IdleCheckInParams, IdleCheckIns

PROMPT = "The user has been silent. Check in."


class Recorder:
    """What the conversation was asked to do, in place of LLM and TTS runs."""

    def __init__(self, conversation: Conversation) -> None:
        self.runs = 0
        self.said: list[str] = []
        self.told: list[dict[str, Any]] = []
        conversation.run_llm = lambda audio=True: setattr(self, "runs", self.runs + 1)  # type: ignore[method-assign]
        conversation.say = self.said.append  # type: ignore[method-assign]
        conversation.events.on(AppMessage, lambda e: self.told.append(e.data))


def setup(**params: Any) -> tuple[Conversation, IdleCheckIns, Recorder, list[str]]:
    conversation = Conversation(LLMContext([{"role": "system", "content": "Be brief."}]), llm=None)  # type: ignore[arg-type]
    recorder = Recorder(conversation)
    ended: list[str] = []
    params.setdefault("check_ins", 2)
    idle = IdleCheckIns(
        conversation, IdleCheckInParams(timeout=7.0, prompt=PROMPT, **params), ended.append
    )
    return conversation, idle, recorder, ended


async def test_check_ins_then_goodbye_then_the_call_ends() -> None:
    conversation, idle, recorder, ended = setup(goodbye="Bye now.")
    for t in (1.0, 2.0):
        conversation.events.emit(UserIdle(t))
    assert recorder.runs == 2
    checks = [m for m in conversation.context.to_openai() if m["content"] == PROMPT]
    assert len(checks) == 2 and all(m["role"] == "system" for m in checks)
    assert not ended and not recorder.said

    conversation.events.emit(UserIdle(3.0))
    assert recorder.runs == 2 and recorder.said == ["Bye now."] and not ended
    conversation.events.emit(BotStoppedSpeaking(4.0))
    assert ended == [END_REASON]
    conversation.events.emit(UserIdle(5.0))
    conversation.events.emit(BotStoppedSpeaking(6.0))
    assert ended == [END_REASON], "once"
    assert [(m["idle_count"], m["ending"]) for m in recorder.told] == [
        (1, False),
        (2, False),
        (3, True),
    ]
    assert recorder.told[0] == {
        "type": "user-idle",
        "idle_seconds": 7.0,
        "idle_count": 1,
        "max_check_ins": 2,
        "ending": False,
    }
    idle.close()


async def test_no_goodbye_hangs_up_at_once() -> None:
    conversation, _, recorder, ended = setup(check_ins=0, goodbye="")
    conversation.events.emit(UserIdle(1.0))
    assert ended == [END_REASON] and recorder.runs == 0 and not recorder.said


async def test_words_from_the_user_start_the_count_again() -> None:
    conversation, _, recorder, ended = setup(check_ins=1)
    conversation.events.emit(UserIdle(1.0))
    conversation.events.emit(UserTranscript("yes, still here", "now"))
    conversation.events.emit(UserIdle(2.0))
    assert recorder.runs == 2 and not ended
    assert [m["idle_count"] for m in recorder.told] == [1, 1]
    conversation.events.emit(UserTranscript("  ", "now"))  # no words: not an answer
    conversation.events.emit(UserIdle(3.0))
    assert recorder.told[-1]["ending"] is True


@pytest.mark.parametrize("end_call", [False])
async def test_without_end_call_the_bot_just_stops_checking_in(end_call: bool) -> None:
    conversation, _, recorder, ended = setup(check_ins=1, end_call=end_call, goodbye="Bye.")
    for t in (1.0, 2.0, 3.0):
        conversation.events.emit(UserIdle(t))
    assert recorder.runs == 1 and not ended and not recorder.said
    assert [m["ending"] for m in recorder.told] == [False, False, False]
