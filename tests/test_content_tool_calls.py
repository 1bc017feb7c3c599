"""Tool calls written as JSON in a model's text: held and parsed, while plain answers pass
through at once (pipeline/services/content_tool_calls.py). No model needed."""

from __future__ import annotations

import re

import pytest

from pipeline.services.content_tool_calls import ContentToolCalls, parse_calls
from pipeline.services.llm import TextDelta, ToolCallRequest


def run(pieces: list[str]) -> tuple[list[list[TextDelta]], list[TextDelta | ToolCallRequest]]:
    """What each piece released, and what the end released."""
    parser = ContentToolCalls()
    released = [parser.feed(piece) for piece in pieces]
    return released, parser.finish()


def chars(text: str) -> list[str]:
    return list(text)  # the worst case: one character per delta


def calls_of(end: list[TextDelta | ToolCallRequest]) -> list[tuple[str, dict]]:
    assert all(isinstance(c, ToolCallRequest) for c in end), end
    return [(c.name, c.arguments) for c in end if isinstance(c, ToolCallRequest)]


def spoken(released: list[list[TextDelta]], end: list[TextDelta | ToolCallRequest]) -> str:
    flat = [d for piece in released for d in piece] + [c for c in end if isinstance(c, TextDelta)]
    return "".join(d.text for d in flat)


FENCED = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (FENCED, [("get_weather", {"city": "Paris"})]),
        ('{"name": "get_current_time", "arguments": {}}', [("get_current_time", {})]),
        ('  \n{"name": "get_current_time"}', [("get_current_time", {})]),
        (
            '{{"name": "get_weather", "arguments": {{"city": "Rome"}}}}}}',
            [("get_weather", {"city": "Rome"})],
        ),
        ('{{"name": "get_current_time", "arguments": {{}}}}', [("get_current_time", {})]),
        (
            '[{"name": "get_current_time", "arguments": {}}, '
            '{"name": "get_weather", "arguments": {"city": "Oslo"}}]',
            [("get_current_time", {}), ("get_weather", {"city": "Oslo"})],
        ),
        (
            '{"name": "get_weather", "parameters": {"city": "Lima"}}',
            [("get_weather", {"city": "Lima"})],
        ),
        (
            '{"function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Kyiv\\"}"}}',
            [("get_weather", {"city": "Kyiv"})],
        ),
        (
            '<tool_call>\n{"name": "get_current_time", "arguments": {"timezone": "UTC"}}'
            "\n</tool_call>",
            [("get_current_time", {"timezone": "UTC"})],
        ),
        (
            '<tools>\n{"name": "get_current_time", "arguments": {}}\n</tools>',
            [("get_current_time", {})],
        ),
        (
            FENCED + "\nThe weather in Paris is sunny and 22 degrees.",  # a guess: dropped
            [("get_weather", {"city": "Paris"})],
        ),
        (
            FENCED + "\n" + FENCED.replace("Paris", "Nice"),
            [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Nice"})],
        ),
        ("{'name': 'get_current_time', 'arguments': {}}", [("get_current_time", {})]),
    ],
)
def test_calls_are_held_and_parsed(text: str, expected: list[tuple[str, dict]]) -> None:
    for pieces in (chars(text), [text]):
        released, end = run(pieces)
        assert not spoken(released, end).strip(), "a tool call must never be spoken"
        assert calls_of(end) == expected
        assert all(re.fullmatch(r"call_[0-9a-f]{24}", c.tool_call_id) for c in end)  # type: ignore[union-attr]


def test_each_call_gets_its_own_id() -> None:
    _, end = run(['[{"name": "a"}, {"name": "b"}]'])
    ids = {c.tool_call_id for c in end if isinstance(c, ToolCallRequest)}
    assert len(ids) == 2


def test_an_unknown_tool_goes_through_for_the_runner_to_refuse() -> None:
    # The tool runner answers a name it does not know with {"error": "unknown tool …"}.
    _, end = run(['{"name": "launch_rocket", "arguments": {"when": "now"}}'])
    assert calls_of(end) == [("launch_rocket", {"when": "now"})]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('```json\n{"name": "get_weather", "arguments": {"city": "Par', "for get_weather"),
        ('{"name": "get_weather", "arguments": "city=Paris"}', "arguments of get_weather"),
        ('{"name": "get_weather", "arguments": ["Paris"]}', "not a JSON object"),
        ('{"city": "Paris"}', "no tool name"),
        ("```json\nnot json at all\n```", "not valid JSON"),
    ],
)
def test_unreadable_calls_become_calls_that_fail(text: str, reason: str) -> None:
    released, end = run(chars(text))
    assert not spoken(released, end).strip()
    [call] = end
    assert isinstance(call, ToolCallRequest) and call.arguments == {}
    # No tool can be named like this (spaces), so the runner answers with an error.
    assert call.name.startswith("invalid tool call (") and reason in call.name
    assert not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", call.name)


async def test_an_invalid_call_gets_an_error_result_from_the_runner() -> None:
    import asyncio

    from pipeline.events import FunctionCall, FunctionCallResult, FunctionCallsStarted
    from pipeline.tools.builtin import default_registry
    from pipeline.tools.runner import ToolRunner

    [call] = parse_calls('{"name": "get_current_time", "arguments": "garbage"}')
    fed: list[object] = []
    runner = ToolRunner(default_registry(), fed.append)
    runner.handle(
        FunctionCallsStarted((FunctionCall(call.tool_call_id, call.name, call.arguments),))
    )
    for _ in range(50):
        if any(isinstance(e, FunctionCallResult) for e in fed):
            break
        await asyncio.sleep(0.01)
    [result] = [e for e in fed if isinstance(e, FunctionCallResult)]
    assert "error" in result.result and "not valid JSON" in result.result["error"]
    await runner.close()


@pytest.mark.parametrize(
    "text",
    [
        "A spider has eight legs.",
        "  Eight. Spiders have eight legs, insects six.",
        "{laughs} Sure, spiders have eight legs.",
        "[pause] Eight legs.",
        "Use `ls` to list files.",
        "Sets like {1, 2} are fine mid-sentence.",
        "I think <b>eight</b>.",
    ],
)
def test_plain_text_passes_through_unchanged(text: str) -> None:
    released, end = run(chars(text))
    assert spoken(released, end) == text
    assert not any(isinstance(c, ToolCallRequest) for c in end)


def test_plain_text_is_released_before_the_stream_ends() -> None:
    parser = ContentToolCalls()
    assert parser.feed("Eight") == [TextDelta("Eight")]  # no waiting for the end
    assert parser.feed(" legs.") == [TextDelta(" legs.")]
    assert parser.finish() == []


def test_text_that_only_opens_like_json_is_released_once_clear() -> None:
    parser = ContentToolCalls()
    assert parser.feed("{") == []  # could be a call
    assert "".join(d.text for d in parser.feed("laughs} Hi")) == "{laughs} Hi"
    assert "".join(d.text for d in parser.feed(" there")) == " there"


def test_a_code_fence_is_spoken_as_text_with_its_closer() -> None:
    text = "```python\nprint('hi')\n```\nThat prints hi."
    released, end = run(chars(text))
    assert spoken(released, end) == text
    assert not any(isinstance(c, ToolCallRequest) for c in end)


def test_a_fence_after_a_preamble_is_held() -> None:
    released, end = run(chars("Let me check. " + FENCED))
    assert spoken(released, end) == "Let me check. "
    assert calls_of(end) == [("get_weather", {"city": "Paris"})]


def test_a_backtick_opener_arriving_in_pieces_waits_for_the_third() -> None:
    parser = ContentToolCalls()
    assert parser.feed("`") == []
    assert parser.feed("`") == []
    assert parser.feed("`json\n{") == []
    parser.feed('"name": "get_current_time"}\n```')
    assert calls_of(parser.finish()) == [("get_current_time", {})]
    assert parser.calls == 1
