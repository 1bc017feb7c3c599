"""The typed message layer and its OpenAI wire boundary."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.context.openai_messages import from_openai, to_openai
from pipeline.messages import (
    AssistantMessage,
    AudioContent,
    BranchSummaryMessage,
    CompactionSummaryMessage,
    CustomMessage,
    DeveloperMessage,
    ImageContent,
    Role,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    Usage,
    UsageCost,
    UserMessage,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 16
WEBP = b"RIFF\x00\x00\x00\x00WEBPVP8 " + b"\x00" * 8
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 8
MP3 = b"ID3\x04\x00" + b"\x00" * 16


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- to OpenAI ----------------------------------------------------------------------------


def test_system_developer_user_and_tool_messages_become_plain_dicts() -> None:
    messages = [
        SystemMessage("Be brief."),
        DeveloperMessage("Prefer metric units."),
        UserMessage.text("Weather in Paris?"),
        ToolMessage(tool_call_id="call_1", content="18C", name="get_weather"),
    ]
    assert to_openai(messages) == [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Prefer metric units."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C", "name": "get_weather"},
    ]


def test_assistant_tool_calls_use_function_type_and_json_string_arguments() -> None:
    call = ToolCallContent(id="call_1", name="get_weather", args={"city": "Zürich", "days": 2})
    message = AssistantMessage([TextContent("Checking."), call])
    assert to_openai([message]) == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city": "Zürich", "days": 2}',
                    },
                }
            ],
        }
    ]


def test_assistant_tool_call_without_text_has_no_content_key() -> None:
    message = AssistantMessage([ToolCallContent(id="c", name="f", args={})])
    wire = to_openai([message])
    assert wire == [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        }
    ]


def test_thinking_is_kept_on_the_message_but_dropped_for_openai() -> None:
    thought = ThinkingContent(content="The user wants brevity.", signature="sig-123")
    message = AssistantMessage([thought, TextContent("Sure.")])
    assert message.thinking() == [thought]
    assert message.thinking()[0].signature == "sig-123"
    assert to_openai([message]) == [{"role": "assistant", "content": "Sure."}]


def test_assistant_message_with_only_thinking_is_not_sent() -> None:
    message = AssistantMessage([ThinkingContent(content="hmm", signature="s")])
    assert to_openai([message]) == []


def test_streamed_assistant_text_parts_are_joined() -> None:
    message = AssistantMessage([TextContent("Hel"), TextContent("lo.")])
    assert message.text_content() == "Hello."
    assert to_openai([message]) == [{"role": "assistant", "content": "Hello."}]


def test_user_text_and_images_become_content_parts() -> None:
    url = "https://example.com/cat.jpg"
    message = UserMessage.with_images("What is this?", [PNG, url, b64(JPEG)])
    assert to_openai([message]) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(PNG)}"}},
                {"type": "image_url", "image_url": {"url": url}},
                {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{b64(JPEG)}"}},
            ],
        }
    ]


def test_image_mime_types_are_sniffed_from_magic_bytes() -> None:
    content = ImageContent([PNG, JPEG, WEBP, b"GIF89a....", b"not an image"])
    assert [mime for _, mime in content.to_base64()] == [
        "image/png",
        "image/jpeg",
        "image/webp",
        "image/gif",
        "application/octet-stream",
    ]


def test_user_audio_becomes_input_audio_parts_with_sniffed_format() -> None:
    message = UserMessage.with_audio("Transcribe this", [WAV, MP3])
    assert to_openai([message]) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Transcribe this"},
                {"type": "input_audio", "input_audio": {"data": b64(WAV), "format": "wav"}},
                {"type": "input_audio", "input_audio": {"data": b64(MP3), "format": "mp3"}},
            ],
        }
    ]


def test_audio_from_a_file_prefix_and_base64_string(tmp_path: Path) -> None:
    clip = tmp_path / "clip.wav"
    clip.write_bytes(WAV)
    content = AudioContent([f"file:{clip}", b64(b"OggS" + b"\x00" * 8), b64(b"fLaC" + b"\0" * 8)])
    assert content.to_base64() == [
        (b64(WAV), "audio/wav"),
        (b64(b"OggS" + b"\x00" * 8), "audio/ogg"),
        (b64(b"fLaC" + b"\0" * 8), "audio/flac"),
    ]


def test_the_reference_factories_build_the_same_content(tmp_path: Path) -> None:
    """``ImageContent.from_file``/``from_url`` and ``AudioContent.from_file``/``from_base64``
    (the reference's factories, documented for apps)."""
    picture, clip = tmp_path / "cat.png", tmp_path / "clip.wav"
    picture.write_bytes(PNG)
    clip.write_bytes(WAV)
    url = "https://example.com/cat.jpg"
    images = [ImageContent.from_file(picture), ImageContent.from_url(url)]
    assert [i.images for i in images] == [[PNG], [url]]
    assert [i.to_base64() for i in images] == [[(b64(PNG), "image/png")], [(url, "")]]
    from_file = AudioContent.from_file(clip)
    assert from_file.audio == [WAV] and from_file.to_base64() == [(b64(WAV), "audio/wav")]
    given = AudioContent.from_base64(b64(MP3), format="mp3")
    message = UserMessage([TextContent("Hear this"), given])
    assert to_openai([message])[0]["content"][1] == {
        "type": "input_audio",
        "input_audio": {"data": b64(MP3), "format": "mp3"},
    }


def test_tool_results_in_a_user_message_become_tool_messages_first() -> None:
    result = ToolResultContent(id="call_1", content="42", metadata={"ms": 3}, terminate=True)
    message = UserMessage([TextContent("and?"), result])
    assert to_openai([message]) == [
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "user", "content": "and?"},
    ]


def test_session_only_messages_are_never_sent() -> None:
    messages = [
        CustomMessage(custom_type="ui-note", data={"x": 1}),
        BranchSummaryMessage(summary="an abandoned branch", from_id="m1"),
    ]
    assert to_openai(messages) == []


def test_compaction_summary_is_sent_as_a_user_message() -> None:
    summary = CompactionSummaryMessage(summary="User is Ana, wants a table for 4.")
    assert summary.role is Role.COMPACTION_SUMMARY
    assert to_openai([summary]) == [
        {"role": "user", "content": "Conversation summary: User is Ana, wants a table for 4."}
    ]


def test_compaction_summary_uses_its_template() -> None:
    summary = CompactionSummaryMessage(summary="S", template="Earlier: {summary} (end)")
    assert to_openai([summary]) == [{"role": "user", "content": "Earlier: S (end)"}]


# -- messages and usage -------------------------------------------------------------------


def test_every_message_gets_a_unique_id_and_a_timestamp() -> None:
    a, b = UserMessage.text("a"), UserMessage.text("b")
    assert a.id != b.id and len(a.id) == 32
    assert a.timestamp > 1_700_000_000
    assert SystemMessage("x", id="fixed").id == "fixed"


def test_roles_include_developer_and_the_session_only_ones() -> None:
    assert [r.value for r in Role] == [
        "system",
        "developer",
        "user",
        "assistant",
        "tool",
        "custom",
        "branch_summary",
        "compaction_summary",
    ]
    assert DeveloperMessage("x").role == "developer"


def test_tool_message_from_result() -> None:
    message = ToolMessage.from_result(ToolResultContent(id="call_9", content="ok"))
    assert (message.tool_call_id, message.content) == ("call_9", "ok")


def test_assistant_message_defaults() -> None:
    message = AssistantMessage.text("hi")
    assert message.usage == Usage()
    assert message.interrupted is False
    assert message.tool_calls() == []


def test_usage_adds_field_by_field_including_cost() -> None:
    a = Usage(10, 5, 2, 1, UsageCost(0.1, 0.2, 0.01, 0.02, 0.33))
    b = Usage(1, 1, 1, 1, UsageCost(1.0, 1.0, 1.0, 1.0, 4.0))
    total = a + b
    assert total == Usage(11, 6, 3, 2, UsageCost(1.1, 1.2, 1.01, 1.02, 4.33))
    assert total.total_tokens == 17
    assert a.add(b) == total
    assert a == Usage(10, 5, 2, 1, UsageCost(0.1, 0.2, 0.01, 0.02, 0.33))  # unchanged


# -- from OpenAI --------------------------------------------------------------------------

CANONICAL: list[dict[str, Any]] = [
    {"role": "system", "content": "You are Parley."},
    {"role": "developer", "content": '{"type": "async_tool"}'},
    {"role": "user", "content": "hello"},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(PNG)}"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            {"type": "input_audio", "input_audio": {"data": b64(WAV), "format": "wav"}},
        ],
    },
    {"role": "assistant", "content": "Hi!"},
    {"role": "assistant", "content": ""},
    {
        "role": "assistant",
        "content": "One moment.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": "café"}'},
            },
            {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "IN_PROGRESS"},
    {"role": "tool", "tool_call_id": "call_2", "content": "12:00", "name": "now"},
]


@pytest.mark.parametrize("wire", CANONICAL, ids=lambda w: w["role"])
def test_openai_dicts_round_trip(wire: dict[str, Any]) -> None:
    assert to_openai([from_openai(wire)]) == [wire]


def test_from_openai_builds_typed_messages() -> None:
    assistant = from_openai(CANONICAL[6])
    assert isinstance(assistant, AssistantMessage)
    assert assistant.text_content() == "One moment."
    assert [(c.id, c.name, c.args) for c in assistant.tool_calls()] == [
        ("call_1", "lookup", {"q": "café"}),
        ("call_2", "now", {}),
    ]
    tool = from_openai(CANONICAL[8])
    assert isinstance(tool, ToolMessage)
    assert (tool.tool_call_id, tool.content, tool.name) == ("call_2", "12:00", "now")
    user = from_openai(CANONICAL[3])
    assert isinstance(user, UserMessage)
    assert [type(c).__name__ for c in user.contents] == [
        "TextContent",
        "ImageContent",
        "ImageContent",
        "AudioContent",
    ]


def test_typed_messages_round_trip_through_the_wire() -> None:
    original = [
        SystemMessage("sys"),
        UserMessage.with_images("see", [PNG]),
        AssistantMessage([ToolCallContent(id="c1", name="f", args={"a": [1, 2]})]),
        ToolMessage(tool_call_id="c1", content="done"),
    ]
    wire = to_openai(original)
    again = [from_openai(d) for d in wire]
    assert to_openai(again) == wire
    assert again[2].tool_calls()[0].args == {"a": [1, 2]}  # type: ignore[union-attr]


def test_pipecat_style_in_progress_call_is_accepted() -> None:
    wire = {
        "role": "assistant",
        "tool_calls": [
            {"id": "c", "function": {"name": "f", "arguments": '{"x": 1}'}, "type": "function"}
        ],
    }
    message = from_openai(wire)
    assert isinstance(message, AssistantMessage)
    assert message.contents == [ToolCallContent(id="c", name="f", args={"x": 1})]


def test_unparsable_tool_arguments_are_kept_verbatim() -> None:
    wire = {
        "role": "assistant",
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"x": 1'}}
        ],
    }
    message = from_openai(wire)
    call = message.tool_calls()[0]  # type: ignore[union-attr]
    assert call.args == {} and call.raw_arguments == '{"x": 1'
    assert to_openai([message]) == [wire]


def test_list_content_of_text_parts_is_normalised() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert to_openai([from_openai({"role": "system", "content": parts})]) == [
        {"role": "system", "content": "ab"}
    ]
    single = [{"type": "text", "text": "hi"}]
    assert to_openai([from_openai({"role": "user", "content": single})]) == [
        {"role": "user", "content": "hi"}
    ]


def test_null_assistant_content_with_tool_calls_round_trips_without_content() -> None:
    wire = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}],
    }
    sent = to_openai([from_openai(wire)])
    assert sent[0] == {
        "role": "assistant",
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    assert json.loads(sent[0]["tool_calls"][0]["function"]["arguments"]) == {}


@pytest.mark.parametrize(
    "wire",
    [
        {"role": "robot", "content": "x"},
        {"content": "no role"},
        {"role": "tool", "content": "no id"},
        {"role": "user", "content": 5},
        {"role": "user", "content": [{"type": "video", "video": {}}]},
        {"role": "user", "content": [{"type": "image_url", "image_url": {}}]},
        {"role": "user", "content": ["just a string"]},
    ],
)
def test_from_openai_rejects_what_is_not_a_chat_message(wire: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        from_openai(wire)
