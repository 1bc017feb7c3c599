"""Keys a caller presses on a phone (DTMF), gathered into user turns.

People key in numbers in runs ("4 1 5 … 5 5 5"), so a key is not a turn: keys pressed
within ``window`` seconds of each other are one entry, which goes to the conversation
as a typed user turn the LLM reads ("pressed on the keypad: 415") once the caller stops
pressing, presses ``end_digit`` (for example ``#``) or fills ``max_digits``. Each key is
also a :class:`KeypadPressed` event, for agents' hooks and observers.

An entry past the call's typed-turn budget (:class:`~pipeline.turns.merge.TypedTextRefused`)
is dropped and counted. A caller keying ``1#`` as fast as the line carries keys makes 50
of them a second: the first is logged, then one line at most every
``REFUSED_LOG_SECONDS`` says how many were dropped since.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger

from pipeline.events.event import Event
from pipeline.turns.merge import TypedTextRefused

DIGITS = frozenset("0123456789*#ABCD")
REFUSED_LOG_SECONDS = 5.0


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``add_turn`` may raise :class:`TypedTextRefused`: the entry is then dropped."""
        self._add_turn = add_turn
        self._emit = emit
        self.end_digit = end_digit
        self.window = window
        self.max_digits = max_digits
        self._digits: list[str] = []
        self._timer: asyncio.TimerHandle | None = None
        self.pressed = 0
        self.entries = 0
        self.refused = 0  # entries dropped: over the typed-turn budget
        self._clock = clock
        self._logged_at: float | None = None  # when a dropped entry was last logged
        self._unlogged = 0  # entries dropped since

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
        try:
            self._add_turn(f"(pressed on the keypad: {keyed})")
        except TypedTextRefused:
            self._refused()

    def close(self) -> None:
        """Forget what was keyed in (the call ended)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._digits.clear()
        if self._unlogged:
            self._log_unlogged()

    def _refused(self) -> None:
        self.refused += 1
        now = self._clock()
        if self._logged_at is None:
            self._logged_at = now
            logger.info("keypad entry dropped: over the typed-turn budget")
        elif now - self._logged_at >= REFUSED_LOG_SECONDS:
            self._unlogged += 1
            self._log_unlogged()
        else:
            self._unlogged += 1

    def _log_unlogged(self) -> None:
        logger.info(
            "keypad: {} more entries dropped over the typed-turn budget ({} in all)",
            self._unlogged, self.refused,
        )  # fmt: skip
        self._logged_at = self._clock()
        self._unlogged = 0
