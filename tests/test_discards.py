"""Every stretch of the user's speech that makes no turn is reported once, with its reason:
the ledger (pipeline/hearing/discards.py) over scripted events, and the barge-in decider's
reasons for letting the bot go on."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from pipeline.context.llm_context import LLMContext
from pipeline.conversation import Conversation
from pipeline.events import (
    Emitter,
    ServiceError,
    SpeechStarted,
    SpeechStopped,
    Transcription,
    UserSpeechDiscarded,
    UserTranscript,
    UserTurnDiscarded,
    UserTurnStarted,
)
from pipeline.hearing.discards import REASONS, SpeechLedger
from pipeline.interruptions.judge import InterruptionDecider, Verdict
from pipeline.services.llm import FixedText
from server.storage.memory import MemoryTranscriptStore
from server.storage.recorder import SessionRecorder
from server.storage.store import ClientInfo


class Scene:
    """An emitter with a ledger on it, and what the ledger reported."""

    def __init__(self) -> None:
        self.events = Emitter()
        self.verdict: str | None = None
        self.ledger = SpeechLedger(self.events, lambda: self.verdict, clock=lambda: 9.0)
        self.reported: list[UserSpeechDiscarded] = []
        self.events.on(UserSpeechDiscarded, self.reported.append)

    def emit(self, *events: object) -> None:
        for event in events:
            self.events.emit(event)  # type: ignore[arg-type]

    @property
    def reasons(self) -> list[str]:
        return [d.reason for d in self.reported]


def turn(onset: float) -> tuple[object, ...]:
    return SpeechStarted(onset), UserTurnStarted(onset + 0.2, "vad", interrupt=True)


def test_a_turn_with_words_is_no_discard() -> None:
    scene = Scene()
    scene.emit(*turn(1.0), UserTranscript("What time is it?", "now"))
    assert scene.reported == []


def test_a_turn_that_ends_with_no_words_is_a_discard() -> None:
    scene = Scene()
    scene.emit(*turn(1.0), UserTranscript("", "now"))
    assert scene.reported == [UserSpeechDiscarded(9.0, "no_words", "", 1.0)]


@pytest.mark.parametrize("reason", ["backchannel", "echo", "no_words"])
def test_speech_over_the_bot_that_let_it_go_on_is_reported_with_the_verdicts_reason(
    reason: str,
) -> None:
    scene = Scene()
    scene.verdict = reason
    scene.emit(*turn(2.0), UserTurnDiscarded(3.0, "Mhm."))
    assert scene.reported == [UserSpeechDiscarded(9.0, reason, "Mhm.", 2.0)]


def test_a_failed_stt_is_reported_once_not_again_as_no_words() -> None:
    scene = Scene()
    scene.emit(*turn(1.0), ServiceError("stt", "timed out"), UserTranscript("", "now"))
    assert scene.reasons == ["stt_error"]
    # Over the bot: the pause ends for want of words, which the failure already explains.
    scene.verdict = "no_words"
    scene.emit(*turn(5.0), ServiceError("stt", "503"), UserTurnDiscarded(6.5))
    assert scene.reasons == ["stt_error", "stt_error"]
    scene.emit(ServiceError("llm", "boom"))  # not the user's speech
    assert scene.reasons == ["stt_error", "stt_error"]


def test_muted_speech_is_reported_whether_or_not_it_was_transcribed() -> None:
    scene = Scene()
    scene.ledger.muted_utterance(onset=0.5)  # began muted: never transcribed
    scene.ledger.transcribed(Transcription("Can you tell me", 2.0), muted=True)
    scene.ledger.transcribed(Transcription("", 2.1), muted=True)  # no words: nothing lost
    scene.ledger.transcribed(Transcription("the answer", 2.2, final=False), muted=True)
    scene.ledger.transcribed(Transcription("What is it?", 3.0), muted=False)
    assert [(d.reason, d.text) for d in scene.reported] == [
        ("muted", ""),
        ("muted", "Can you tell me"),
    ]


def test_speech_still_in_flight_when_the_call_ends_is_reported() -> None:
    scene = Scene()
    scene.emit(*turn(1.0))
    scene.ledger.call_ended(2)  # one utterance being transcribed, one being recorded
    scene.ledger.call_ended(0)
    assert scene.reported == [UserSpeechDiscarded(9.0, "call_ended", "", 1.0)] * 2


def test_a_turn_emptied_by_the_mute_is_not_counted_twice() -> None:
    scene = Scene()
    scene.emit(*turn(1.0))
    scene.ledger.transcribed(Transcription("Can you", 2.0), muted=True)
    scene.emit(UserTranscript("", "now"))
    assert scene.reasons == ["muted"]
    assert scene.ledger.counts == {reason: int(reason == "muted") for reason in REASONS}


# -- the barge-in decider's reasons ---------------------------------------------------------


def decide(*events: object, bot_words: str = "Once upon a time there was a robot.") -> str | None:
    decider = InterruptionDecider()
    decider.bot_words = bot_words
    decider.start(0.0)
    for event in events:
        verdict = decider.handle(event)  # type: ignore[arg-type]
        if verdict is not None:
            return decider.reason if verdict is Verdict.RESUME else "interrupt"
    verdict = decider.advance(10.0)
    return decider.reason if verdict is Verdict.RESUME else "interrupt"


def test_the_decider_says_why_the_bot_went_on() -> None:
    stop = SpeechStopped(0.4)
    assert decide(stop, Transcription("Mhm.", 0.6)) == "backchannel"
    assert decide(stop, Transcription("there was a robot", 0.6)) == "echo"
    assert decide(stop, Transcription("", 0.6)) == "no_words"
    assert decide(stop) == "no_words"  # no words in time
    assert decide(stop, Transcription("Can you tell me what the answer is?", 0.6)) == "interrupt"


# -- the stored transcript ------------------------------------------------------------------


async def test_the_record_keeps_backchannels_and_discards_with_their_reason() -> None:
    store = MemoryTranscriptStore()
    await store.start()
    conversation = Conversation(LLMContext([]), FixedText("unused"))
    recorder = SessionRecorder(store, "pc", None, ClientInfo())
    recorder.observe(conversation)
    emit = conversation.events.emit
    onset = time.monotonic() - 2.0  # the session's clock: the speech began 2 s ago
    emit(UserSpeechDiscarded(onset + 1.0, "backchannel", "Mhm.", onset))
    emit(UserSpeechDiscarded(onset + 1.5, "muted", "Can you tell me", onset))
    emit(UserSpeechDiscarded(onset + 1.8, "stt_error"))
    record = await store.get("pc")  # a live record (this store forgets ended ones)
    assert record is not None
    kinds = [(e.type, e.data.get("reason"), e.data.get("text")) for e in record.events]
    assert kinds == [
        ("backchannel", None, "Mhm."),
        ("discard", "muted", "Can you tell me"),
        ("discard", "stt_error", ""),
    ]
    spoken = datetime.fromisoformat(record.events[1].data["started_at"])
    assert abs(spoken.timestamp() - (time.time() - 2.0)) < 1.0  # wall time, not monotonic
    assert "started_at" not in record.events[2].data  # no onset known
    assert record.turns == []
    await store.close()
