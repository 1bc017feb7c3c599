"""Preemptive replies: an answer started before the user's turn has ended, and held.

When the turn logic foresees the end of the user's turn
(:class:`~pipeline.events.UserTurnEndPredicted`), the conversation starts the bot turn at
once on the context as it will be (the user's words appended), but everything it
produces is held: its events wait in a list, its audio in a :class:`HeldOutput`. Nobody
sees or hears any of it.

- The turn ends and the context is exactly what the reply was computed from: the reply
  is *released*: its events go out in order, its audio to the real output, and it goes
  on as an ordinary bot turn. The answer starts as soon as the turn ends, the LLM and
  TTS latency already spent.
- The user goes on (the VAD confirms speech), or the context at the end differs (more
  words came in, a tool result arrived): the reply is *dropped*: its task is cancelled
  (closing the LLM and TTS streams) and its held events and audio are thrown away. The
  client never learns it existed; the only trace is the wasted-call count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np

from pipeline.context.llm_context import LLMContext
from pipeline.events import Event, PreemptiveReplyEnded
from pipeline.reply.playout_pacing import AudioOutput


class HeldOutput:
    """An :class:`~pipeline.reply.playout_pacing.AudioOutput` that keeps writes and marks until
    :meth:`release` (then passes them on in order, and everything after), or forgets
    them at :meth:`drop`."""

    def __init__(self, output: AudioOutput) -> None:
        self._output = output
        self._held: list[tuple[str, tuple[Any, ...]]] = []
        self._released = False
        self._dropped = False

    @property
    def playing(self) -> bool:
        return self._released and self._output.playing

    def write(self, pcm: bytes | np.ndarray, sample_rate: int, text: str | None = None) -> None:
        if self._released:
            self._output.write(pcm, sample_rate, text)
        elif not self._dropped:
            self._held.append(("write", (pcm, sample_rate, text)))

    def mark(self, callback: Callable[[], None]) -> None:
        if self._released:
            self._output.mark(callback)
        elif not self._dropped:
            self._held.append(("mark", (callback,)))

    def flush(self) -> None:
        if self._released:
            self._output.flush()
        else:
            self._held.clear()

    def release(self) -> None:
        self._released = True
        held, self._held = self._held, []
        for kind, args in held:
            if kind == "write":
                self._output.write(*args)
            else:
                self._output.mark(*args)

    def drop(self) -> None:
        self._dropped = True
        self._held.clear()


class HeldReply:
    """A bot turn running on a foreseen context, invisible until released.

    ``messages`` (and ``tools``) are what its LLM was asked with: the reply may be
    released only if the context, once the turn has ended, asks the same.
    """

    def __init__(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        emit: Callable[[Event], None],
        output: AudioOutput | None,
    ) -> None:
        self.messages = messages
        self.tools = tools
        self.output = HeldOutput(output) if output is not None else None
        self.task: asyncio.Task[None] | None = None
        self._emit = emit
        self._events: list[Event] = []
        self._released = False

    def emit(self, event: Event) -> None:
        """The bot turn's emit: held until released."""
        if self._released:
            self._emit(event)
        else:
            self._events.append(event)

    def matches(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> bool:
        return not self._released and messages == self.messages and tools == self.tools

    def release(self) -> None:
        """Play the reply: its held events, in order, then its audio."""
        self._released = True
        events, self._events = self._events, []
        for event in events:
            self._emit(event)
        if self.output is not None:
            self.output.release()

    def drop(self) -> None:
        """Forget the reply: cancel its turn, throw its events and audio away."""
        self._events.clear()
        if self.output is not None:
            self.output.drop()
        if self.task is not None and not self.task.done():
            self.task.cancel()


def foreseen(
    context: LLMContext, message: dict[str, Any], prepare: list[Callable[[], None]]
) -> list[dict[str, Any]]:
    """What the LLM will be asked once the user's turn ends with ``message``: the
    context with it, after whatever is refreshed before each run (the ``<ui_state>``).
    The context itself is left as it was."""
    added = context.add_message(message)
    for hook in prepare:
        hook()
    messages = context.to_openai()
    context.set_messages([m for m in context.messages if m is not added])
    return messages


Launch = Callable[[list[dict[str, Any]], Callable[[Event], None], AudioOutput], asyncio.Task[None]]


class PreemptiveReplies:
    """A conversation's preemptive reply: at most one, held until the turn ends.

    ``launch(messages, emit, output)`` starts a bot turn on ``messages`` that reports
    through ``emit`` and plays on ``output``; ``emit`` is where released events and the
    :class:`~pipeline.events.PreemptiveReplyEnded` reports go.
    """

    def __init__(self, launch: Launch, emit: Callable[[Event], None], output: AudioOutput) -> None:
        self._launch = launch
        self._emit = emit
        self._output = output
        self._held: HeldReply | None = None

    @property
    def holding(self) -> bool:
        return self._held is not None

    def start(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> None:
        """Start a held reply on ``messages`` (unless one is held on these already: one
        foreseen on other words, at a pause the user then spoke through, is dropped)."""
        if self._held is not None:
            if self._held.matches(messages, tools):
                return
            self.drop("the words changed")
        held = HeldReply(messages, tools, self._emit, self._output)
        assert held.output is not None
        held.task = self._launch(messages, held.emit, held.output)
        self._held = held

    def take(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> asyncio.Task[None] | None:
        """The turn ended and its answer is to start on ``messages``: the held reply's
        task, released, if it was computed from exactly these; else None (and it is
        dropped)."""
        held, self._held = self._held, None
        if held is None:
            return None
        if held.matches(messages, tools):
            held.release()
            self._emit(PreemptiveReplyEnded(used=True))
            return held.task
        self._forget(held, "the context changed")
        return None

    def drop(self, reason: str) -> None:
        """The user went on (or anything else made the held reply useless)."""
        held, self._held = self._held, None
        if held is not None:
            self._forget(held, reason)

    def _forget(self, held: HeldReply, reason: str) -> None:
        held.drop()
        self._emit(PreemptiveReplyEnded(used=False, reason=reason))
