"""What happens when the user goes quiet: tell the client, check in, and in the end hang up.

Turn-taking emits ``UserIdle`` ``timeout`` seconds after the bot stopped speaking with no
user turn since (:class:`pipeline.turns.idle.UserIdleController`). Each time:

- the client is told, with an app message (RTVI ``server-message``)
  ``{type: "user-idle", idle_seconds, idle_count, max_check_ins, ending}``;
- up to ``check_ins`` times in a row, the LLM is told (a system message, ``prompt``) to
  check in on the user ("Are you still there?") and answers; its speech ending restarts
  the idle timer;
- the time after that, with ``end_call``, the bot says ``goodbye`` and the call ends
  (reason ``user idle``) once it has been spoken (or at once with no goodbye, or after
  ``GOODBYE_LIMIT`` seconds if it could not be spoken).

Words from the user (a transcript or typed text going into the context) start the count
again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from loguru import logger

from pipeline.context.llm_context import LLMContext
from pipeline.events import AppMessage, BotStoppedSpeaking, Emitter, UserIdle, UserTranscript

END_REASON = "user idle"
GOODBYE_LIMIT = 10.0  # seconds the goodbye may take before the call ends anyway


@dataclass(frozen=True)
class IdleCheckInParams:
    """``timeout``: the idle timer's seconds (reported to the client); ``prompt``: the
    check-in instruction for the LLM; ``goodbye``: spoken before hanging up ("": none)."""

    timeout: float
    prompt: str
    check_ins: int = 2
    end_call: bool = True
    goodbye: str = ""


class Conversing(Protocol):
    """What check-ins need of the conversation (:class:`pipeline.conversation.Conversation`)."""

    events: Emitter
    context: LLMContext

    @property
    def bot_active(self) -> bool: ...

    def run_llm(self, audio: bool = True) -> None: ...

    def say(self, text: str) -> None: ...


class IdleCheckIns:
    """Reacts to ``UserIdle`` on one conversation; ``end_call(reason)`` hangs up."""

    def __init__(
        self,
        conversation: Conversing,
        params: IdleCheckInParams,
        end_call: Callable[[str], None] | None = None,
    ) -> None:
        self.conversation = conversation
        self.params = params
        self.end_call = end_call
        self.idle_count = 0  # idle periods in a row, without a word from the user
        self._ending = False
        self._deadline: asyncio.TimerHandle | None = None
        events = conversation.events
        events.on(UserIdle, self._idle)
        events.on(UserTranscript, self._answered)
        events.on(BotStoppedSpeaking, lambda _: self._goodbye_spoken())

    def _idle(self, _event: UserIdle) -> None:
        if self._ending:
            return
        self.idle_count += 1
        ending = self.idle_count > self.params.check_ins and self.params.end_call
        self.conversation.events.emit(
            AppMessage(
                {
                    "type": "user-idle",
                    "idle_seconds": self.params.timeout,
                    "idle_count": self.idle_count,
                    "max_check_ins": self.params.check_ins,
                    "ending": ending,
                }
            )
        )
        if self.idle_count <= self.params.check_ins:
            self.conversation.context.add_message({"role": "system", "content": self.params.prompt})
            self.conversation.run_llm()
        elif ending:
            self._end()

    def _answered(self, event: UserTranscript) -> None:
        if event.content.strip():
            self.idle_count = 0

    def _end(self) -> None:
        self._ending = True
        logger.info("the user stayed idle after {} check-ins: ending the call", self.idle_count - 1)
        if not self.params.goodbye or self.conversation.bot_active:
            self._hang_up()
            return
        self.conversation.say(self.params.goodbye)
        self._deadline = asyncio.get_running_loop().call_later(GOODBYE_LIMIT, self._hang_up)

    def _goodbye_spoken(self) -> None:
        if self._ending:
            self._hang_up()

    def _hang_up(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self.end_call is not None:
            end, self.end_call = self.end_call, None  # once
            end(END_REASON)

    def close(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
