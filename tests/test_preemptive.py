"""Held replies: nothing of a reply started before the turn ended is seen or heard until it
is released; a dropped one leaves no trace."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np

from pipeline.events import Event, LLMResponseStarted, LLMText, PreemptiveReplyEnded
from pipeline.reply.preemptive import HeldOutput, HeldReply, PreemptiveReplies

MESSAGES = [{"role": "user", "content": "What time is it?"}]


class Output:
    """What reached the real output, in order."""

    def __init__(self) -> None:
        self.playing = False
        self.calls: list[tuple[str, Any]] = []

    def write(self, pcm: Any, sample_rate: int, text: str | None = None) -> None:
        self.calls.append(("write", text))

    def mark(self, callback: Callable[[], None]) -> None:
        self.calls.append(("mark", callback))

    def flush(self) -> None:
        self.calls.append(("flush", None))


PCM = np.zeros(480, np.int16)


def test_held_output_passes_nothing_on_until_released_then_everything_in_order() -> None:
    real = Output()
    held = HeldOutput(real)
    done: list[str] = []
    held.write(PCM, 24000, "One.")
    held.mark(lambda: done.append("one"))
    held.write(PCM, 24000, "Two.")
    assert real.calls == [] and not held.playing
    held.release()
    assert [kind for kind, _ in real.calls] == ["write", "mark", "write"]
    assert real.calls[0][1] == "One." and real.calls[2][1] == "Two."
    held.write(PCM, 24000, "Three.")  # after the release: straight through
    held.flush()
    assert real.calls[-2:] == [("write", "Three."), ("flush", None)]


def test_a_dropped_or_flushed_held_output_forgets_what_it_held() -> None:
    real = Output()
    held = HeldOutput(real)
    held.write(PCM, 24000, "One.")
    held.flush()  # before the release: the held audio goes, the real output is untouched
    held.release()
    assert real.calls == []
    dropped = HeldOutput(real)
    dropped.write(PCM, 24000, "One.")
    dropped.drop()
    dropped.write(PCM, 24000, "Late.")  # a turn still unwinding
    assert real.calls == []


def test_held_reply_events_wait_and_come_out_in_order() -> None:
    out: list[Event] = []
    reply = HeldReply(MESSAGES, None, out.append, Output())
    reply.emit(LLMResponseStarted())
    reply.emit(LLMText("It is "))
    assert out == []
    assert reply.matches(list(MESSAGES), None)
    assert not reply.matches([*MESSAGES, {"role": "user", "content": "more"}], None)
    assert not reply.matches(MESSAGES, [{"type": "function"}])
    reply.release()
    reply.emit(LLMText("noon."))
    assert out == [LLMResponseStarted(), LLMText("It is "), LLMText("noon.")]
    assert not reply.matches(MESSAGES, None)  # released: it cannot be taken twice


async def test_preemptive_replies_release_a_match_and_drop_the_rest() -> None:
    events: list[Event] = []
    real = Output()
    launched: list[asyncio.Task[None]] = []

    def launch(messages: Any, emit: Callable[[Event], None], output: Any) -> asyncio.Task[None]:
        async def turn() -> None:
            emit(LLMResponseStarted())
            output.write(PCM, 24000, "Noon.")
            await asyncio.sleep(10)

        task = asyncio.get_running_loop().create_task(turn())
        launched.append(task)
        return task

    replies = PreemptiveReplies(launch, events.append, real)
    replies.start(MESSAGES, None)
    replies.start(MESSAGES, None)  # one at a time
    await asyncio.sleep(0.01)
    assert len(launched) == 1 and events == [] and real.calls == []
    task = replies.take(list(MESSAGES), None)
    assert task is launched[0] and not replies.holding
    assert events == [LLMResponseStarted(), PreemptiveReplyEnded(used=True)]
    assert real.calls == [("write", "Noon.")]

    events.clear()
    replies.start(MESSAGES, None)
    await asyncio.sleep(0.01)
    assert replies.take([{"role": "user", "content": "What time is it in Paris?"}], None) is None
    await asyncio.sleep(0.01)
    assert launched[1].cancelled()
    assert events == [PreemptiveReplyEnded(used=False, reason="the context changed")]

    events.clear()
    replies.start(MESSAGES, None)
    replies.drop("the user went on")
    await asyncio.sleep(0.01)
    assert launched[2].cancelled() and real.calls == [("write", "Noon.")]
    assert events == [PreemptiveReplyEnded(used=False, reason="the user went on")]
    task.cancel()
