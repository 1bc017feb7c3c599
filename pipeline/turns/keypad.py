"""Keys a caller presses on a phone (DTMF), gathered into user turns.

People key in numbers in runs ("4 1 5 … 5 5 5"), so a key is not a turn: keys pressed
within ``window`` seconds of each other are one entry, which goes to the conversation
as a typed user turn the LLM reads ("pressed on the keypad: 415") once the caller stops
pressing, presses ``end_digit`` (for example ``#``) or fills ``max_digits``. Each key is
also a :class:`KeypadPressed` event, for agents' hooks and observers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.events.event import Event

DIGITS = frozenset("0123456789*#ABCD")


@dataclass(frozen=True, slots=True)
class KeypadPressed(Event):
    """The caller pressed one key."""

    digit: str


class Keypad:
    """Gathers a call's key presses into entries (see the module docstring)."""

    def __init__(
        self,
        add_turn: Callable[[str], None],
        emit: Callable[[Event], None],
        end_digit: str = "",
        window: float = 2.0,
        max_digits: int = 32,
    ) -> None:
        self._add_turn = add_turn
        self._emit = emit
        self.end_digit = end_digit
        self.window = window
        self.max_digits = max_digits
        self._digits: list[str] = []
        self._timer: asyncio.TimerHandle | None = None
        self.pressed = 0
        self.entries = 0

    def press(self, digit: str) -> None:
        """One key; ``ValueError`` if it is not a DTMF key."""
        if digit not in DIGITS:
            raise ValueError(f"not a DTMF key: {digit!r}")
        self.pressed += 1
        self._emit(KeypadPressed(digit))
        if digit == self.end_digit:
            self.flush()  # the end key ends the entry; it is not part of it
            return
        self._digits.append(digit)
        if len(self._digits) >= self.max_digits:
            self.flush()
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(self.window, self.flush)

    def flush(self) -> None:
        """Send what has been keyed in so far as one user turn (nothing if nothing was)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._digits:
            return
        keyed, self._digits = "".join(self._digits), []
        self.entries += 1
        self._add_turn(f"(pressed on the keypad: {keyed})")

    def close(self) -> None:
        """Forget what was keyed in (the call ended)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._digits.clear()
