"""Tools that return pictures: an :class:`ImageResult` reaches the LLM as an image.

A chat-completions tool message carries text only. So, as Pipecat does with a function
call's image (a ``UserImageRawFrame`` tied to the call), the tool message holds the
call's JSON result and the picture follows it in a user message of its own, in the
context before the LLM runs on the result::

    assistant  tool_calls: [look_at_camera]
    tool       {"image": "the image follows in the next message", "source": "camera", ...}
    user       [image_url: data:image/jpeg;base64,...]

The picture never travels in the result event: :meth:`ToolImages.feed` takes it out as
the runner reports the result, so whatever reads results (RTVI reports, the transcript
store, job groups, the assistant aggregator) sees plain JSON. :meth:`ToolImages.handle`,
subscribed after the assistant aggregator, puts it in once the tool's result is there
(the aggregator starts the LLM a loop step later, so the run sees it).

An LLM that takes no images (``enabled=False``), data that is no image, or an image
over :data:`MAX_IMAGE_BYTES` gives an error result instead, which the LLM can talk about.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.context.llm_context import LLMContext
from pipeline.events import Emitter, Event, FunctionCallResult
from pipeline.messages import ImageContent, UserMessage, sniff_mime

IMAGE_ATTACHED = "the image follows in the next message"
# Encoded bytes a tool's image may have: a screenshot-sized PNG fits, a raw photo does not
# (the provider would refuse it, or bill it dearly on every turn it stays in the context).
MAX_IMAGE_BYTES = 2_000_000
_KINDS = "JPEG, PNG, GIF or WebP"


@dataclass(frozen=True)
class ImageResult:
    """What a tool returns to show the LLM a picture.

    ``image``: encoded bytes (JPEG, PNG, GIF, WebP), a ``data:image/...`` URL or an
    ``https://`` URL (the provider fetches it). ``result``: what the tool message says
    besides, JSON-able (a dict's keys go beside ``"image"``, anything else under
    ``"result"``)."""

    image: bytes | str
    result: Any = None


def _problem(image: bytes | str) -> str | None:
    """Why ``image`` cannot be shown, or None."""
    if isinstance(image, bytes):
        if len(image) > MAX_IMAGE_BYTES:
            return f"the image is too large ({len(image)} bytes; at most {MAX_IMAGE_BYTES})"
        if sniff_mime(image, "image") == "application/octet-stream":
            return f"the tool returned data that is not an image ({_KINDS})"
        return None
    if image.startswith("data:image/"):
        return None if len(image) <= MAX_IMAGE_BYTES * 4 // 3 + 100 else "the image is too large"
    if image.startswith(("https://", "http://")):
        return None
    return "the tool returned neither image bytes, a data:image URL nor an http(s) URL"


def _tool_message(result: Any) -> dict[str, Any]:
    """The JSON the tool message holds in place of the picture."""
    if isinstance(result, dict):
        return {"image": IMAGE_ATTACHED, **result}
    if result is None:
        return {"image": IMAGE_ATTACHED}
    return {"image": IMAGE_ATTACHED, "result": result}


class ToolImages:
    """Moves one conversation's tool pictures from the results into the context."""

    def __init__(self, context: LLMContext, enabled: bool) -> None:
        self.context = context
        self.enabled = enabled  # the LLM takes images (PARLEY_LLM_VISION)
        self._pending: dict[str, list[ImageContent]] = {}
        self.shown = 0  # pictures put in the context

    def feed(self, forward: Callable[[Event], None]) -> Callable[[Event], None]:
        """A ``feed`` for the tool runner: results pass to ``forward`` with their
        pictures taken out (kept until :meth:`handle` sees the same result)."""

        def feed(event: Event) -> None:
            if isinstance(event, FunctionCallResult):
                event = self._take_picture(event)
            forward(event)

        return feed

    def attach(self, events: Emitter) -> None:
        """Subscribe to results; after the assistant aggregator (the conversation's own
        subscriptions come first), so the picture lands after the tool's result."""
        events.on(FunctionCallResult, self.handle)

    def _take_picture(self, event: FunctionCallResult) -> FunctionCallResult:
        result = event.result
        if isinstance(result, ImageContent):  # a bare ImageContent: its first picture
            result = ImageResult(result.images[0]) if result.images else None
        if not isinstance(result, ImageResult):
            return event
        problem = _problem(result.image)
        if problem is None and not self.enabled:
            problem = "this LLM takes no images (PARLEY_LLM_VISION is off)"
        if problem is not None:
            return dataclasses.replace(event, result={"error": f"image not shown: {problem}"})
        self._pending.setdefault(event.tool_call_id, []).append(ImageContent([result.image]))
        return dataclasses.replace(event, result=_tool_message(result.result))

    def handle(self, event: FunctionCallResult) -> None:
        pictures = self._pending.pop(event.tool_call_id, None)
        # Only beside a result the aggregator kept (not one of a call it had dropped).
        if pictures and self.context.find_tool_message(event.tool_call_id) is not None:
            self.context.add_message(UserMessage(list(pictures)))
            self.shown += len(pictures)
