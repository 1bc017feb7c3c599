"""Tools that return pictures (pipeline/vision/image_results.py), with the real emitter, tool
runner, assistant aggregator and context: the result stays JSON for everyone who reads
it, and the picture follows the tool's result in the context before the LLM runs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pipeline.aggregators import AssistantAggregator
from pipeline.context.llm_context import LLMContext
from pipeline.events import (
    Emitter,
    Event,
    FunctionCall,
    FunctionCallInProgress,
    FunctionCallResult,
    FunctionCallsStarted,
    LLMRunRequested,
)
from pipeline.messages import ImageContent, UserMessage
from pipeline.tools.registry import ToolRegistry
from pipeline.tools.runner import ToolRunner
from pipeline.vision.image_results import ImageResult, ToolImages

# The smallest valid PNG (1 x 1, transparent) and a JPEG's first bytes.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63000100000500010d0a2db40000000049454e44ae426082"
)


class Bench:
    """Emitter → aggregator → context, a runner feeding through ToolImages, as a session."""

    def __init__(self, result: Any, enabled: bool = True) -> None:
        self.registry = ToolRegistry()

        @self.registry.tool()
        async def snap() -> Any:
            """Take a picture."""
            return result

        self.context = LLMContext([{"role": "system", "content": "Be brief."}])
        self.events = Emitter()
        self.seen: list[Event] = []
        self.at_run: list[list[dict[str, Any]]] = []  # the wire context when each run starts
        aggregator = AssistantAggregator(self.context, self.events.emit, clock=lambda: "T")
        for kind in (FunctionCallsStarted, FunctionCallInProgress, FunctionCallResult):
            self.events.on(kind, aggregator.handle)
        self.images = ToolImages(self.context, enabled=enabled)
        self.images.attach(self.events)  # after the aggregator, as in a session
        ToolRunner(self.registry, self.images.feed(self.events.emit)).attach(self.events)
        self.events.on(FunctionCallResult, self.seen.append)
        self.events.on(LLMRunRequested, lambda _: self.at_run.append(self.context.to_openai()))

    async def call(self) -> list[dict[str, Any]]:
        self.events.emit(FunctionCallsStarted((FunctionCall("c1", "snap"),)))
        for _ in range(50):
            if self.at_run:
                return self.at_run[0]
            await asyncio.sleep(0.01)
        raise AssertionError("the LLM never ran on the result")


async def test_the_picture_follows_the_result_before_the_llm_runs() -> None:
    bench = Bench(ImageResult(PNG, {"source": "camera", "seconds_old": 0.2}))
    wire = await bench.call()
    at = next(i for i, m in enumerate(wire) if m.get("tool_call_id") == "c1")
    assert json.loads(wire[at]["content"]) == {
        "image": "the image follows in the next message", "source": "camera", "seconds_old": 0.2,
    }  # fmt: skip
    [part] = wire[at + 1]["content"]
    assert wire[at + 1]["role"] == "user" and part["type"] == "image_url"
    assert part["image_url"]["url"].startswith("data:image/png;base64,iVBOR")
    [result] = bench.seen
    json.dumps(result.result)  # what RTVI, the transcript store and job groups read: JSON
    assert bench.images.shown == 1


async def test_a_bare_image_content_and_a_url_work_too() -> None:
    wire = await Bench(ImageContent([PNG])).call()
    assert sum(isinstance(m["content"], list) for m in wire if m["role"] == "user") == 1
    wire = await Bench(ImageResult("https://example.org/cat.jpg", "a cat")).call()
    assert json.loads(wire[-2]["content"])["result"] == "a cat"
    assert wire[-1]["content"][0]["image_url"]["url"] == "https://example.org/cat.jpg"


async def test_what_cannot_be_shown_is_an_error_result_and_no_picture() -> None:
    for result, enabled, says in (
        (ImageResult(PNG), False, "this LLM takes no images"),
        (ImageResult(b"%PDF-1.7 not a picture"), True, "not an image"),
        (ImageResult(b"\x89PNG" + bytes(2_000_000)), True, "too large"),
        (ImageResult("ftp://example.org/x.png"), True, "neither image bytes"),
    ):
        bench = Bench(result, enabled=enabled)
        wire = await bench.call()
        error = json.loads(wire[-1]["content"])["error"]
        assert error.startswith("image not shown: ") and says in error, error
        assert not any(isinstance(m, UserMessage) for m in bench.context.messages)


async def test_plain_results_pass_untouched() -> None:
    bench = Bench({"time": "noon"})
    wire = await bench.call()
    assert json.loads(wire[-1]["content"]) == {"time": "noon"}
    assert bench.images.shown == 0
