"""What the agent sees of the user's video, in its context: the current picture with each
user turn (an option), and a budget that keeps only the newest pictures.

- **Every turn** (``every_turn``): at the start of each user turn the call's video is
  asked for a fresh picture (a keyframe, decoded once it arrives, well before the turn
  ends); just before the LLM runs on the turn, the newest picture of a live source (the
  shared screen first, else the camera) joins the user's message as an
  :class:`ImageContent`. Pictures older than :data:`MAX_TURN_FRAME_AGE` are not sent:
  a stale view presented as the current one would mislead.
- **Budget** (``max_images``): pictures cost hundreds of tokens each on every LLM call
  they stay in, so before each run all but the newest ``max_images`` of them are dropped
  (a message that held nothing else, a tool's picture, goes with them). The text stays.

Messages are changed in place: :func:`pipeline.reply.preemptive.foreseen` runs the same hooks on
a message it adds and then removes by identity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pipeline.context.llm_context import LLMContext
from pipeline.events import Emitter, UserTurnStarted
from pipeline.messages import ImageContent, UserContent, UserMessage
from pipeline.vision.tools import CAMERA, SCREEN, CapturedFrame, FrameSource

# A picture older than this is not sent as the user's current view.
MAX_TURN_FRAME_AGE = 10.0


@dataclass(frozen=True)
class VisionParams:
    every_turn: bool = False
    max_images: int = 3
    prefer: tuple[str, ...] = (SCREEN, CAMERA)  # which source a turn shows, when both are live


def keep_newest_images(context: LLMContext, keep: int) -> int:
    """Drop all but the ``keep`` newest pictures from the user messages of ``context``;
    a message left empty is removed. Returns how many were dropped."""
    budget = keep
    dropped = 0
    emptied: list[UserMessage] = []
    for message in reversed(context.messages):
        if not isinstance(message, UserMessage):
            continue
        contents = message.contents
        if not any(isinstance(c, ImageContent) for c in contents):
            continue
        kept: list[UserContent] = []
        for content in reversed(contents):  # the last picture of a message is its newest
            if isinstance(content, ImageContent):
                take = content.images[len(content.images) - budget :] if budget > 0 else []
                dropped += len(content.images) - len(take)
                budget -= len(take)
                if len(take) == len(content.images):
                    kept.append(content)
                elif take:
                    kept.append(ImageContent(list(take)))
            else:
                kept.append(content)
        message.contents = kept[::-1]  # the same message: see the module docstring
        if not message.contents:
            emptied.append(message)
    if emptied:
        context.set_messages([m for m in context.messages if all(m is not e for e in emptied)])
    return dropped


class Conversing(Protocol):
    """What pictures need of the conversation (:class:`pipeline.conversation.Conversation`)."""

    events: Emitter
    before_llm_run: list[Callable[[], None]]


class VisionContext:
    """One conversation's pictures: the frame with each turn and the image budget."""

    def __init__(self, context: LLMContext, frames: FrameSource, params: VisionParams) -> None:
        self.context = context
        self.frames = frames
        self.params = params
        self._given: str | None = None  # id of the last user message given a picture
        self.turn_frames = 0  # pictures sent with user turns
        self.dropped = 0  # pictures dropped by the budget

    def attach(self, conversation: Conversing) -> None:
        """Run before each LLM run; with ``every_turn``, refresh at each user turn."""
        conversation.before_llm_run.append(self.before_llm_run)
        if self.params.every_turn:
            conversation.events.on(UserTurnStarted, lambda _: self.frames.refresh())

    def before_llm_run(self) -> None:
        if self.params.every_turn:
            self._give_turn_a_frame()
        self.dropped += keep_newest_images(self.context, self.params.max_images)

    def current_frame(self) -> CapturedFrame | None:
        """The picture a turn shows: the preferred live source's newest, if recent."""
        live = self.frames.live_sources()
        for source in self.params.prefer:
            frame = self.frames.latest(source) if source in live else None
            if frame is not None and frame.age() <= MAX_TURN_FRAME_AGE:
                return frame
        return None

    def _give_turn_a_frame(self) -> None:
        messages = self.context.messages
        last = messages[-1] if messages else None
        if not isinstance(last, UserMessage) or last.id == self._given:
            return  # the LLM runs on a tool's result, or this turn has its picture
        if any(isinstance(c, ImageContent) for c in last.contents):
            return  # a tool's picture, or one the app added
        frame = self.current_frame()
        if frame is None:
            return
        last.contents.append(ImageContent([frame.jpeg]))
        self._given = last.id
        self.turn_frames += 1
