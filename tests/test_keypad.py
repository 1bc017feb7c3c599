"""Keys a caller presses, gathered into user turns (pipeline/turns/keypad.py)."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.events.event import Event
from pipeline.turns.keypad import Keypad, KeypadPressed


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
