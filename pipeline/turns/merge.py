"""Taking back a user turn that was ended too early, with the start of its answer; and
typed turns gathered the same way.

When the user goes on right after their turn was ended and answering began, the turn
was not over: its message, and what the bot had started to say in reply, come out of
the context, and the turn's words begin the turn in progress. The context then never
holds half a turn and its premature answer.

Typed text (RTVI ``send-text``) is gathered likewise (:class:`TypedTurns`): texts that
come within a short window, or while the answer to the last one is still being
prepared, are one user turn and one LLM request; and a session may ask for only so many
typed answers a second. Without it, each text interrupted the answer in progress and
sent the whole context again: a client typing fast multiplied the LLM's cost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast

from pipeline.aggregators import UserAggregator
from pipeline.context.llm_context import LLMContext
from pipeline.events import (
    BotStartedSpeaking,
    Emitter,
    Event,
    FunctionCallInProgress,
    LLMText,
    UserTurnMerged,
)
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


class TypedTextRefused(Exception):
    """A send-text over the session's typed-turn budget; the message says why."""


@dataclass(frozen=True)
class TypedTurnParams:
    """``window``: seconds a typed turn waits for more text (0: answered at once);
    ``rate`` / ``burst``: texts asking for an answer, per second and at once;
    ``max_chars``: the longest merged turn (more text starts the next turn)."""

    window: float = 0.3
    rate: float = 1.0
    burst: int = 10
    max_chars: int = 4096


class Answering(Protocol):
    """What :class:`TypedTurns` needs of the conversation (:class:`pipeline.conversation.
    Conversation`, which imports this module)."""

    context: LLMContext
    user: UserAggregator

    @property
    def bot_active(self) -> bool: ...

    def interrupt(self, t: float | None = None) -> None: ...

    def run_llm(self, audio: bool = True) -> None: ...


class TypedTurns:
    """Typed user turns (RTVI ``send-text``), coalesced as spoken turns are.

    A text that asks for an answer waits ``window`` seconds for more (each new one
    restarts the wait, up to ``HOLD_WINDOWS`` windows in all); together they become one
    user turn and one LLM request. A text that arrives while the answer to the last typed
    turn is still being prepared (nothing of it has reached the client: no text, speech
    or tool call yet) takes that turn back, as a spoken merge does, and joins it. So a
    burst of texts costs one request with the context, not one each plus one for each
    answer it cut off. Past ``rate``/``burst``, a text that asks for an answer is refused
    (:class:`TypedTextRefused`); text with ``run_immediately: false`` costs no request and
    is only bounded by the context's budget.
    """

    HOLD_WINDOWS = 4

    def __init__(
        self,
        conversation: Answering,
        emit: Callable[[Event], None],
        params: TypedTurnParams | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.conversation = conversation
        self.params = params or TypedTurnParams()
        self._emit = emit
        self._clock = clock
        self._texts: list[str] = []  # the turn being gathered
        self._run = False  # whether it asks for an answer
        self._audio = True
        self._first = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._asked: UserMessage | None = None  # the last typed turn sent to the LLM
        self._answer_seen = False  # whether anything of its answer reached the client
        self._tokens = float(self.params.burst)
        self._refilled = clock()
        self.refused = 0
        self.merged = 0  # texts that joined another one's turn

    def attach(self, events: Emitter) -> None:
        """Learn when an answer starts to show (it is then no longer being prepared)."""
        for kind in (LLMText, BotStartedSpeaking, FunctionCallInProgress):
            events.on(kind, self._answer_shows)

    def add(self, text: str, run_immediately: bool = True, audio: bool = True) -> None:
        """One ``send-text``; raises :class:`TypedTextRefused` past the rate budget."""
        if run_immediately:
            self._take_token()
        elif not self._texts:
            self.conversation.user.add_text(text, run_llm=False)  # no answer: nothing to wait for
            return
        if run_immediately and not self._texts:
            self._take_back_prepared(text)
        if self._texts and len("\n".join([*self._texts, text])) > self.params.max_chars:
            self.flush()  # a full turn goes now; this text begins the next
        if not self._texts:
            self._first = self._clock()
        self._texts.append(text)
        self._run = self._run or run_immediately
        self._audio = audio if run_immediately else self._audio
        self._schedule()

    def flush(self) -> None:
        """The gathered turn goes into the context now, and is answered if it asks."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._texts:
            return
        text, run, audio = "\n".join(self._texts), self._run, self._audio
        self._texts, self._run, self._audio = [], False, True
        conversation = self.conversation
        if run and conversation.bot_active:
            conversation.interrupt()  # a typed turn barges in, as speech does
        message = conversation.user.add_text(text, run_llm=False)
        if run:
            # cast: add_text adds the typed text as a user message (typed as any Message).
            self._asked, self._answer_seen = cast(UserMessage, message), False
            conversation.run_llm(audio=audio)

    def close(self) -> None:
        """Session end: what was typed stays in the context, unanswered."""
        self._run = False
        self.flush()

    def _answer_shows(self, _event: Event) -> None:
        self._answer_seen = True

    def _take_token(self) -> None:
        now = self._clock()
        rate, burst = self.params.rate, self.params.burst
        self._tokens = min(burst, self._tokens + (now - self._refilled) * rate)
        self._refilled = now
        if self._tokens < 1.0:
            self.refused += 1
            wait = (1.0 - self._tokens) / rate
            raise TypedTextRefused(
                f"too many typed turns ({rate:g} per second, {burst} at once): "
                f"try again in {wait:.1f} s"
            )
        self._tokens -= 1.0

    def _take_back_prepared(self, text: str) -> None:
        """Join the last typed turn if its answer is still being prepared."""
        asked, conversation = self._asked, self.conversation
        if asked is None or self._answer_seen or not conversation.bot_active:
            return
        if asked is not conversation.user.last_message:
            return  # the user spoke since: that turn is being answered, not ours
        if len(asked.text_content()) + 1 + len(text) > self.params.max_chars:
            return
        conversation.interrupt()
        taken = take_back_turn(conversation.context, asked)
        self._asked = None
        if taken is None:
            return
        user_text, assistant_text = taken
        self._texts, self._run, self._first = [user_text], True, self._clock()
        self.merged += 1
        self._emit(UserTurnMerged(user_text, assistant_text))

    def _schedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        window = self.params.window
        if not self._run:
            return  # nothing asks for an answer yet: flushed with the next that does
        hold_until = self._first + self.HOLD_WINDOWS * window
        delay = min(window, hold_until - self._clock())
        if delay <= 0:
            self.flush()
            return
        self._timer = asyncio.get_running_loop().call_later(delay, self.flush)
