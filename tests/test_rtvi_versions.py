"""RTVI 1.x and 2.x side by side: negotiation, the message shapes each version gets from
the same pipeline events, ``dtmf`` into the keypad, and the track's word progress."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from pipeline.events import (
    BotStartedSpeaking,
    BotStoppedSpeaking,
    BotText,
    BotTextProgress,
    BotTextStarted,
    Emitter,
    Event,
    Interruption,
    LLMResponseEnded,
    LLMResponseStarted,
    LLMText,
    SpeechStarted,
    SpeechStopped,
    TTSStarted,
    TTSStopped,
    UserTurnStarted,
)
from pipeline.turns.keypad import Keypad
from server.media.outbound_track import OUT_RATE, PacedAudioTrack, word_starts
from server.rtvi import protocol, server_messages
from server.rtvi.events import RTVIEvents
from server.rtvi.handler import ClientMessages, RTVIHandler
from server.rtvi.versions import ClientProtocol
from server.session.client_requests import SessionRequests

# -- negotiation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("announced", "served"),
    [("2.1.0", "2.1.0"), ("2.0.0", "2.1.0"), ("2", "2.1.0"), ("1.4.0", "1.4.0"),
     ("1.0.0", "1.4.0"), ("3.0.0", "1.4.0"), ("0.3.0", "1.4.0"), (None, "1.4.0"),
     ("\u00b2.0.0", "1.4.0")],
)  # fmt: skip
def test_each_client_is_served_its_major_or_else_1_4(announced: str | None, served: str) -> None:
    client = ClientProtocol()
    assert client.version == "1.4.0", "1.x until a client-ready says otherwise"
    assert client.negotiate(announced) == served == client.version
    assert client.takes_dtmf is (served == "2.1.0")


def test_vad_messages_are_2_x_only() -> None:
    client = ClientProtocol()
    assert not client.sends("vad-user-started-speaking") and client.sends("bot-interrupted")
    client.negotiate("2.1.0")
    assert client.sends("vad-user-started-speaking") and client.sends("bot-output")


# -- the same events, per version ------------------------------------------------------------------

A_SPOKEN_TURN: list[Event] = [
    LLMResponseStarted(),
    LLMText("One two three. Four."),
    TTSStarted(),
    LLMResponseEnded(),
    TTSStopped(),
    BotStartedSpeaking(1.0),
    BotTextStarted("One two three."),
    BotTextProgress("One two three.", "One"),
    BotTextProgress("One two three.", "One two"),
    BotTextProgress("One two three.", "One two three."),
    BotText("One two three."),
    BotTextStarted("Four."),  # no word progress: completed once played
    BotText("Four."),
    BotStoppedSpeaking(2.0),
]


def observe(version: str) -> tuple[Emitter, RTVIEvents, list[dict[str, Any]]]:
    events, sent = Emitter(), []
    client = ClientProtocol()
    client.negotiate(version)
    rtvi = RTVIEvents(sent.append, client_protocol=client)
    rtvi.subscribe(events)
    return events, rtvi, sent


def outputs(sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for msg in sent:
        server_messages.validate(msg)
    return [m["data"] for m in sent if m["type"] == "bot-output"]


def test_a_1_x_client_gets_the_1_4_messages_and_no_progress() -> None:
    events, _, sent = observe("1.4.0")
    for event in A_SPOKEN_TURN:
        events.emit(event)
    assert outputs(sent) == [
        {"text": "One two three.", "spoken": True, "aggregated_by": "sentence"},
        {"text": "Four.", "spoken": True, "aggregated_by": "sentence"},
    ]
    assert [m["type"] for m in sent if m["type"] != "bot-output"] == [
        "bot-llm-started", "bot-llm-text", "bot-tts-started", "bot-llm-stopped",
        "bot-tts-stopped", "bot-started-speaking", "bot-tts-text", "bot-transcription",
        "bot-tts-text", "bot-transcription", "bot-stopped-speaking",
    ]  # fmt: skip


def spoken(segment_id: int, text: str, status: str, heard: str) -> dict[str, Any]:
    return {
        "text": text,
        "aggregated_by": "sentence",
        "will_be_spoken": True,
        "segment_id": segment_id,
        "spoken_status": status,
        "spoken_progress": {"accumulated_text": heard, "remaining_text": text[len(heard) :]},
    }


def test_a_2_x_client_gets_each_sentence_new_then_word_by_word_then_completed() -> None:
    events, _, sent = observe("2.1.0")
    for event in A_SPOKEN_TURN:
        events.emit(event)
    first = "One two three."
    assert outputs(sent) == [
        spoken(1, first, "new", ""),
        spoken(1, first, "in-progress", "One"),
        spoken(1, first, "in-progress", "One two"),
        spoken(1, first, "completed", first),  # at its last word: none again once played
        spoken(2, "Four.", "new", ""),
        spoken(2, "Four.", "completed", "Four."),
    ]
    types = [m["type"] for m in sent]
    assert types.count("bot-tts-text") == 2 and types.count("bot-transcription") == 2
    assert types.index("bot-tts-text") < types.index("bot-output"), "the caption first"


def test_a_sentence_cut_short_is_never_completed() -> None:
    events, _, sent = observe("2.1.0")
    for event in (
        BotTextStarted("One two three four."),
        BotTextProgress("One two three four.", "One"),
        BotText("One two"),  # the flush: the words that went out
        Interruption(1.0),
    ):
        events.emit(event)
    statuses = [o["spoken_status"] for o in outputs(sent)]
    assert statuses == ["new", "in-progress"]
    assert [m["type"] for m in sent][-2:] == ["bot-transcription", "bot-interrupted"]
    assert sent[-2]["data"] == {"text": "One two"}


def test_a_text_answer_goes_by_the_sentence_to_2_x_and_by_the_chunk_to_1_x() -> None:
    chunks = ["Hello", " there. How", " are you", "?"]
    answer = [*(BotText(c, spoken=False, includes_spaces=True) for c in chunks)]
    v1, _, sent1 = observe("1.4.0")
    v2, _, sent2 = observe("2.1.0")
    for events in (v1, v2):
        for event in (LLMResponseStarted(), *answer, LLMResponseEnded()):
            events.emit(event)
    assert outputs(sent1) == [{"text": c, "spoken": False, "aggregated_by": "word"} for c in chunks]
    assert outputs(sent2) == [
        {"text": "Hello there.", "aggregated_by": "sentence", "will_be_spoken": False,
         "segment_id": 1},
        {"text": "How are you?", "aggregated_by": "sentence", "will_be_spoken": False,
         "segment_id": 2},
    ]  # fmt: skip
    types = [m["type"] for m in sent2]
    assert types.index("bot-llm-stopped") == len(types) - 1, "the last sentence before it"
    assert "bot-transcription" not in types


def test_an_interrupted_text_answer_sends_what_it_had() -> None:
    events, _, sent = observe("2.1.0")
    events.emit(BotText("Half a sent", spoken=False, includes_spaces=True))
    events.emit(Interruption(1.0))
    assert [m["type"] for m in sent] == ["bot-output", "bot-interrupted"]
    assert sent[0]["data"]["text"] == "Half a sent"


def test_the_vads_own_start_and_stop_go_to_2_x_clients_only() -> None:
    both = ["vad-user-started-speaking", "vad-user-stopped-speaking"]
    for version, expected in (("1.4.0", []), ("2.1.0", both)):
        events, rtvi, sent = observe(version)
        for event in (SpeechStarted(1.0), UserTurnStarted(1.0, "vad"), SpeechStopped(2.0)):
            rtvi.vad(event)  # as hearing tells it, before the conversation
        events.emit(SpeechStarted(1.0))  # the conversation's copy is not sent again
        assert [m["type"] for m in sent] == expected, version
        assert all(server_messages.validate(m) is None for m in sent)


@pytest.mark.parametrize(
    "data",
    [
        {"text": "x", "aggregated_by": "sentence", "will_be_spoken": True, "spoken": True},
        {"text": "x", "aggregated_by": "sentence", "will_be_spoken": True,
         "spoken_status": "done"},
        {"text": "x", "aggregated_by": "sentence", "will_be_spoken": True, "segment_id": "a"},
        {"text": "x", "aggregated_by": "sentence", "will_be_spoken": True,
         "spoken_progress": {"accumulated_text": "x"}},
        {"text": "x", "aggregated_by": "sentence"},
    ],
)  # fmt: skip
def test_a_bot_output_must_be_one_version_or_the_other(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        server_messages.validate({"label": "rtvi-ai", "type": "bot-output", "data": data})


# -- the handler: client-ready and dtmf ----------------------------------------------------------


class Target:
    """A session for SessionRequests: a real keypad whose entries are recorded."""

    def __init__(self) -> None:
        self.entries: list[str] = []
        keypad = Keypad(self.entries.append, lambda _: None, end_digit="#")
        self.voice = SimpleNamespace(keypad=keypad, client_ready=lambda: None)
        self.client = SimpleNamespace()
        self.record = None

    def greet(self) -> None:
        """What the session does at client-ready (a recording notice, the greeting)."""


class Session:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, msg: dict[str, Any]) -> None:
        server_messages.validate(msg)
        self.sent.append(msg)

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        return asyncio.create_task(coro, name=name)


def handler() -> tuple[RTVIHandler, Session, Target]:
    session, target = Session(), Target()
    requests = SessionRequests(target)  # type: ignore[arg-type]
    rtvi = RTVIHandler(session, ClientMessages(), requests=requests)  # type: ignore[arg-type]
    return rtvi, session, target


def msg(type_: str, msg_id: str, data: Any) -> dict[str, Any]:
    return {"label": "rtvi-ai", "type": type_, "id": msg_id, "data": data}


def ready(version: str) -> dict[str, Any]:
    return msg("client-ready", "r", {"version": version, "about": {"library": "t"}})


async def test_client_ready_announces_the_served_version() -> None:
    rtvi, session, _ = handler()
    rtvi.handle(ready("2.1.0"))
    assert [(m["type"], m["data"].get("version")) for m in session.sent] == [("bot-ready", "2.1.0")]
    rtvi.handle(ready("3.0.0"))  # another major: refused, then served as 1.x
    refusal, bot_ready = session.sent[1:]
    assert refusal["type"] == "error-response" and refusal["id"] == "r"
    assert "unsupported RTVI version '3.0.0'" in refusal["data"]["error"]
    assert bot_ready["data"]["version"] == protocol.PROTOCOL_VERSION == "1.4.0"
    assert rtvi.client_protocol.version == "1.4.0"


async def test_dtmf_from_a_2_x_client_goes_to_the_keypad() -> None:
    rtvi, session, target = handler()
    rtvi.handle(ready("2.1.0"))
    rtvi.handle(msg("dtmf", "d1", {"buttons": ["1", "2", "#"]}))  # 2.1: one message
    rtvi.handle(msg("dtmf", "d2", {"button": "4"}))  # 2.0: one key a message
    rtvi.handle(msg("dtmf", "d3", {"button": "#"}))
    assert target.entries == ["(pressed on the keypad: 12)", "(pressed on the keypad: 4)"]
    assert [m["type"] for m in session.sent] == ["bot-ready"], "nothing refused"
    target.voice.keypad.close()


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"buttons": ["1", "x", "2"]}, "not a DTMF key: 'x'"),
        ({"buttons": ["12"]}, "not a DTMF key"),
        ({"buttons": []}, "buttons"),
        ({"buttons": ["1"] * 33}, "buttons"),
        ({"button": "1", "buttons": ["2"]}, "either buttons"),
        ({}, "either buttons"),
        ({"buttons": [1]}, "buttons"),
    ],
)
async def test_bad_dtmf_is_refused_and_presses_nothing(data: dict[str, Any], error: str) -> None:
    rtvi, session, target = handler()
    rtvi.handle(ready("2.1.0"))
    rtvi.handle(msg("dtmf", "d", data))
    answer = session.sent[-1]
    assert answer["type"] == "error-response" and answer["id"] == "d"
    assert error in answer["data"]["error"]
    assert target.voice.keypad.pressed == 0


async def test_dtmf_from_a_1_x_client_is_refused() -> None:
    rtvi, session, target = handler()
    rtvi.handle(ready("1.4.0"))
    rtvi.handle(msg("dtmf", "d", {"buttons": ["1"]}))
    assert session.sent[-1]["type"] == "error-response"
    assert "RTVI 2" in session.sent[-1]["data"]["error"]
    assert target.voice.keypad.pressed == 0


# -- word progress from playout --------------------------------------------------------------------


def test_word_starts_place_each_word_by_the_characters_before_it() -> None:
    assert word_starts("ab cd  ef") == [(0.0, 2), (3 / 9, 5), (7 / 9, 9)]
    assert word_starts("") == []


async def test_the_track_reports_each_word_as_playout_reaches_it() -> None:
    track = PacedAudioTrack()
    progress: list[tuple[str, str]] = []
    track.on_progress = lambda text, heard: progress.append((text, heard))
    text = "one two three four five six seven eight nine ten"
    track.write(np.full(OUT_RATE // 5, 1000, np.int16), OUT_RATE, text=text)  # ten frames
    for _ in range(5):
        await track.recv()
    # A word is reached once the frame its start falls in has gone out: "two" starts at
    # 4/49 of the text, inside the first of ten frames.
    assert progress == [
        (text, "one two"),
        (text, "one two three"),
        (text, "one two three four"),
        (text, "one two three four five"),
        (text, "one two three four five six"),
    ], "one report per frame, with every word started so far"
    for _ in range(5):
        await track.recv()
    # "ten" starts in the last frame, which ends the segment: its end is told instead
    # (segment_played, the RTVI "completed").
    assert progress[-1] == (text, text.removesuffix(" ten"))
    heard = [h for _, h in progress]
    assert heard == sorted(set(heard), key=len), "each report is news"
