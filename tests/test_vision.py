"""The image budget (pipeline/vision/camera.py) and the vision settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pipeline.context.llm_context import LLMContext
from pipeline.messages import AssistantMessage, ImageContent, TextContent, UserMessage
from pipeline.vision.camera import keep_newest_images
from server.settings import Settings


def pictures(context: LLMContext) -> list[str | bytes]:
    return [
        image
        for m in context.messages
        if isinstance(m, UserMessage)
        for c in m.contents
        if isinstance(c, ImageContent)
        for image in c.images
    ]


def conversation() -> tuple[LLMContext, UserMessage]:
    spoken = UserMessage([TextContent("what is this?"), ImageContent([b"p1"])])
    return LLMContext(
        [
            {"role": "system", "content": "Be brief."},
            spoken,
            AssistantMessage.text("A cup."),
            UserMessage([ImageContent([b"p2", b"p3"])]),  # a tool's pictures
            UserMessage([TextContent("and this?"), ImageContent([b"p4"])]),
        ]
    ), spoken


def test_the_newest_pictures_stay_and_the_words_with_them() -> None:
    context, spoken = conversation()
    assert keep_newest_images(context, 2) == 2
    assert pictures(context) == [b"p3", b"p4"]
    assert spoken in context.messages and spoken.text_content() == "what is this?"
    assert [c.type for c in spoken.contents] == ["text"]
    assert keep_newest_images(context, 2) == 0  # within the budget: nothing more


def test_a_message_of_pictures_only_goes_with_its_last_picture() -> None:
    context, _ = conversation()
    before = len(context.messages)
    assert keep_newest_images(context, 1) == 3
    assert pictures(context) == [b"p4"]
    assert len(context.messages) == before - 1
    wire = context.to_openai()
    assert [m["role"] for m in wire] == ["system", "user", "assistant", "user"]
    assert wire[1]["content"] == "what is this?"


def test_messages_keep_their_identity() -> None:
    context, _ = conversation()
    last = context.messages[-1]
    keep_newest_images(context, 1)
    assert context.messages[-1] is last  # see pipeline.reply.preemptive.foreseen


def test_vision_needs_an_llm_that_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_LLM", "local")
    with pytest.raises(ValidationError, match="llm_vision needs an LLM that sees"):
        Settings(llm_vision=True)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    assert Settings(llm="anthropic", llm_vision=True).llm_vision
    monkeypatch.setenv("PARLEY_LLM", "openai")
    settings = Settings(llm_vision=True)
    assert (settings.vision_max_images, settings.vision_image_size) == (3, 512)
    assert not settings.vision_every_turn
    for bad in ({"vision_max_images": 0}, {"vision_image_size": 32}):
        with pytest.raises(ValidationError):
            Settings(llm_vision=True, **bad)
