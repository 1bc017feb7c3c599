"""Taking back a user turn that was ended too early, with the start of its answer.

When the user goes on right after their turn was ended and answering began, the turn
was not over: its message, and what the bot had started to say in reply, come out of
the context, and the turn's words begin the turn in progress. The context then never
holds half a turn and its premature answer.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.aggregators import UserAggregator
from pipeline.context import LLMContext
from pipeline.frames import Event, UserTurnMerged
from pipeline.messages import AssistantMessage, Message, SystemMessage, UserMessage


def take_back_turn(context: LLMContext, user_message: Message) -> tuple[str, str] | None:
    """Remove ``user_message`` and the reply after it from ``context``.

    Returns ``(user text, assistant text)``, or ``None`` (and changes nothing) when the
    message is not in the context or anything but plain assistant text (and system
    notes, such as the ``<ui_state>``) followed it: a reply that called tools has acted
    on the turn, and is not taken back.
    """
    messages = context.messages
    index = next((i for i, m in enumerate(messages) if m is user_message), None)
    if index is None or not isinstance(user_message, UserMessage):
        return None
    after = messages[index + 1 :]
    replies = [m for m in after if isinstance(m, AssistantMessage)]
    if any(m.tool_calls() for m in replies) or any(
        not isinstance(m, AssistantMessage | SystemMessage) for m in after
    ):
        return None
    kept = messages[:index] + [m for m in after if isinstance(m, SystemMessage)]
    context.set_messages(kept)
    answer = " ".join(m.text_content() for m in replies if m.text_content())
    return user_message.text_content(), answer


class TurnMerger:
    """One session's merges: a barge-in within ``window`` seconds of the end of the
    user's last turn takes that turn back, once the interruption has been recorded."""

    def __init__(
        self,
        context: LLMContext,
        user: UserAggregator,
        emit: Callable[[Event], None],
        window: float,
    ) -> None:
        self.context = context
        self.user = user
        self.window = window
        self._emit = emit
        self._last: tuple[float, Message] | None = None  # (end, message) of the last turn
        self._merging: Message | None = None

    def turn_stopped(self, t: float) -> None:
        """A user turn ended (its message was just added by the user aggregator)."""
        message = self.user.last_message
        self._last = (t, message) if message is not None else None

    def barge_in(self, t: float) -> None:
        """The user's voice over the answer: the turn it answers may be taken back."""
        last, self._last = self._last, None
        if last is not None and t - last[0] <= self.window:
            self._merging = last[1]

    def cancel(self) -> None:
        """It was a backchannel: nothing to take back."""
        self._merging = None

    def interrupted(self) -> None:
        """The answer was cut off and closed: take the turn and the answer back."""
        message, self._merging = self._merging, None
        if message is None or message is not self.user.last_message:
            return  # no merge, or typed text came in between
        taken = take_back_turn(self.context, message)
        if taken is None:
            return
        user_text, assistant_text = taken
        self.user.resume(user_text, self.user.last_started_at)
        self._emit(UserTurnMerged(user_text, assistant_text))
