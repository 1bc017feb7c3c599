"""Turn-completion markers: the LLM says whether the user had finished their thought.

With ``filter_incomplete_user_turns`` on, the LLM is told to begin every answer with one
marker: ✓ (the user finished: answer), ○ (cut off mid-thought: wait a little), or ◐ (the
user needs time to think: wait longer). Answers marked incomplete are suppressed; if
the user stays silent past the timeout, the LLM is asked to re-engage them. Markers never
reach TTS, the client or the transcript, but they stay in the context (as in the
reference): the filter reports the marker it saw (:attr:`TurnCompletionFilter.marker`),
and the assistant message is stored as "✓ <answer>", or "○" / "◐" alone for a turn left
unanswered, so the LLM reads its own verdicts back and the context keeps alternating.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

COMPLETE = "✓"
INCOMPLETE_SHORT = "○"
INCOMPLETE_LONG = "◐"
MARKERS = (COMPLETE, INCOMPLETE_SHORT, INCOMPLETE_LONG)

INSTRUCTIONS = f"""
Every reply must start with exactly one turn marker, then a space:
{COMPLETE} the user finished their thought: answer them.
{INCOMPLETE_SHORT} the user was cut off mid-sentence and will go on in a moment: write nothing else.
{INCOMPLETE_LONG} the user is thinking and needs more time: write nothing else.
Never mention the markers.
""".strip()


@dataclass
class TurnCompletionConfig:
    """How incomplete turns are handled; defaults follow common practice (5 s / 15 s)."""

    instructions: str = INSTRUCTIONS
    incomplete_short_timeout: float = 5.0
    incomplete_long_timeout: float = 15.0
    incomplete_short_prompt: str = (
        "The user paused mid-sentence and has not continued. Gently prompt them to go on."
    )
    incomplete_long_prompt: str = (
        "The user has been thinking for a while. Check in with them briefly."
    )


class Verdict(Enum):
    UNDECIDED = "undecided"
    COMPLETE = "complete"
    INCOMPLETE_SHORT = "incomplete_short"
    INCOMPLETE_LONG = "incomplete_long"


def with_instructions(messages: list[dict[str, Any]], instructions: str) -> list[dict[str, Any]]:
    """The wire messages with the marker instructions added to the system prompt (the
    context itself is left alone: the instructions are for the LLM, not the transcript)."""
    if messages and messages[0].get("role") == "system":
        first = {**messages[0], "content": f"{messages[0].get('content', '')}\n\n{instructions}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": instructions}, *messages]


def strip_markers(text: str) -> str:
    """Remove every turn marker; trims whitespace only if a marker was removed."""
    if not any(m in text for m in MARKERS):
        return text
    for marker in MARKERS:
        text = text.replace(marker, "")
    return text.strip()


class TurnCompletionFilter:
    """Reads one streamed answer; passes text on only once it is marked complete.

    Feed each LLM text chunk to :meth:`feed`; it returns the text to pass on (possibly
    empty). Text before the verdict is held back. An answer with no marker at all is
    treated as complete (a model that ignores the instruction must not go mute).
    """

    def __init__(self) -> None:
        self.verdict = Verdict.UNDECIDED
        self.marker = ""  # the marker the answer began with ("" until seen, or if none)
        self._held = ""
        self._at_start = True  # drop the space that follows the marker

    def feed(self, chunk: str) -> str:
        if self.verdict is Verdict.COMPLETE:
            return self._pass(chunk)
        if self.verdict is not Verdict.UNDECIDED:
            return ""
        self._held += chunk
        head = self._held.lstrip()
        for marker, verdict in (
            (COMPLETE, Verdict.COMPLETE),
            (INCOMPLETE_SHORT, Verdict.INCOMPLETE_SHORT),
            (INCOMPLETE_LONG, Verdict.INCOMPLETE_LONG),
        ):
            if head.startswith(marker):
                self.verdict = verdict
                self.marker = marker
                self._held = ""
                return self._pass(head[len(marker) :]) if verdict is Verdict.COMPLETE else ""
        if head:  # markers are single characters: the first one decides
            self.verdict = Verdict.COMPLETE
            self._held = ""
            return self._pass(head)
        return ""

    def _pass(self, text: str) -> str:
        for marker in MARKERS:
            text = text.replace(marker, "")
        if self._at_start:
            text = text.lstrip()
            self._at_start = not text
        return text

    def finish(self) -> str:
        """End of the answer: anything still held (an answer shorter than a marker)."""
        held, self._held = self._held, ""
        if self.verdict is Verdict.UNDECIDED:
            self.verdict = Verdict.COMPLETE
            return held.strip()
        return ""

    @property
    def suppressed(self) -> bool:
        return self.verdict in (Verdict.INCOMPLETE_SHORT, Verdict.INCOMPLETE_LONG)

    def reprompt_after(self, config: TurnCompletionConfig) -> tuple[float, str] | None:
        """(seconds to wait, prompt) when the answer was suppressed, else None."""
        if self.verdict is Verdict.INCOMPLETE_SHORT:
            return config.incomplete_short_timeout, config.incomplete_short_prompt
        if self.verdict is Verdict.INCOMPLETE_LONG:
            return config.incomplete_long_timeout, config.incomplete_long_prompt
        return None


class Reprompt:
    """The nudge after an answer the LLM marked incomplete: unless cancelled first (the
    user speaks, another answer starts), ``run(prompt)`` asks the LLM to re-engage the
    user once the marker's timeout has passed in silence."""

    def __init__(self, run: Callable[[str], None]) -> None:
        self._run = run
        self._timer: asyncio.TimerHandle | None = None

    def schedule(self, seconds: float, prompt: str) -> None:
        self.cancel()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._fire, prompt)

    def _fire(self, prompt: str) -> None:
        self._timer = None
        self._run(prompt)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
