"""Keys a caller presses, gathered into user turns (pipeline/turns/keypad.py), and entries
over the typed-turn budget dropped with a log line now and then, not one each."""

from __future__ import annotations

import asyncio
import re

import pytest
from loguru import logger

from pipeline.events.event import Event
from pipeline.turns.keypad import REFUSED_LOG_SECONDS, Keypad, KeypadPressed
from pipeline.turns.merge import TypedTextRefused
from server.media.outbound_track import PacedAudioTrack
from server.session.model_services import build_services
from server.session.voice import VoiceSession
from server.settings import Settings
from testkit.openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401


def keypad(**params: object) -> tuple[Keypad, list[str], list[Event]]:
    turns: list[str] = []
    events: list[Event] = []
    return Keypad(turns.append, events.append, **params), turns, events  # type: ignore[arg-type]


async def test_keys_in_a_run_are_one_entry_sent_when_the_caller_stops() -> None:
    pad, turns, events = keypad(window=0.1)
    for digit in "415":
        pad.press(digit)
        await asyncio.sleep(0.03)
    assert turns == []
    await asyncio.sleep(0.15)
    assert turns == ["(pressed on the keypad: 415)"]
    assert events == [KeypadPressed("4"), KeypadPressed("1"), KeypadPressed("5")]


async def test_the_end_key_sends_the_entry_at_once_and_is_not_part_of_it() -> None:
    pad, turns, events = keypad(end_digit="#", window=5.0)
    for digit in "12#":
        pad.press(digit)
    assert turns == ["(pressed on the keypad: 12)"]
    assert KeypadPressed("#") in events
    pad.press("#")  # nothing keyed in: no empty entry
    assert len(turns) == 1 and pad.entries == 1 and pad.pressed == 4


async def test_a_full_entry_goes_and_the_next_key_starts_another() -> None:
    pad, turns, _ = keypad(max_digits=3, window=5.0)
    for digit in "1234":
        pad.press(digit)
    assert turns == ["(pressed on the keypad: 123)"]
    pad.close()  # the call ended: what was keyed in since is dropped, no timer left
    await asyncio.sleep(0)
    assert turns == ["(pressed on the keypad: 123)"]


async def test_what_is_not_a_key_is_refused() -> None:
    pad, turns, events = keypad()
    with pytest.raises(ValueError, match="not a DTMF key"):
        pad.press("x")
    assert turns == [] and events == [] and pad.pressed == 0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def refuse(entry: str) -> None:
    raise TypedTextRefused("too many typed turns (1 per second, 10 at once)")


async def test_entries_over_the_budget_are_dropped_and_logged_now_and_then() -> None:
    """A caller keying ``1#`` as fast as the line carries keys (50 entries a second), all
    over the typed-turn budget: each entry dropped and counted, one log line at the first,
    then at most one every ``REFUSED_LOG_SECONDS`` with how many went unlogged."""
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="INFO")
    clock = Clock()
    pad = Keypad(refuse, lambda event: None, end_digit="#", clock=clock)
    try:
        for _ in range(10):  # ten seconds of it
            for _ in range(50):
                pad.press("1")
                pad.press("#")
                clock.now += 0.02
        pad.close()  # the call ends: what went unlogged is told
    finally:
        logger.remove(sink)
    dropped = [line for line in lines if "keypad" in line]
    assert pad.refused == 500 and pad.entries == 500
    assert 1 <= len(dropped) <= 2 + 10 / REFUSED_LOG_SECONDS, dropped
    assert dropped[0] == "keypad entry dropped: over the typed-turn budget"
    told = sum(int(m.group(1)) for m in map(re.compile(r"(\d+) more").search, dropped[1:]) if m)
    assert 1 + told == 500, dropped  # every dropped entry is in a line


async def test_a_calls_keys_over_the_budget_log_a_line_now_and_then(
    openai_stub: OpenAIStub,
) -> None:
    """The server's path: a phone caller's keys through the call's voice pipeline, whose
    typed-turn budget (``PARLEY_TYPED_TURN_RATE``) they exhaust at once."""
    settings = Settings(**openai_stub.server_settings(
        greeting="", telephony_end_digit="#", typed_turn_rate="0.1", typed_turn_burst="2",
    ))  # fmt: skip
    voice = VoiceSession(build_services(settings), settings, PacedAudioTrack(), lambda _: None)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="INFO")
    try:
        for _ in range(250):  # five seconds of keys at the line's rate, in a moment
            voice.keypad.press("1")
            voice.keypad.press("#")
        await voice.close()
    finally:
        logger.remove(sink)
    dropped = [line for line in lines if "keypad" in line]
    assert 1 <= len(dropped) <= 2, f"{len(dropped)} lines"
    assert voice.keypad.entries == 250 and voice.keypad.refused == 248
