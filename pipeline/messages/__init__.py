"""The typed message layer: content types, messages, usage.

Everything the conversation holds is a message dataclass from this package. Only
:mod:`pipeline.context.openai_messages` turns them into chat-completions dicts and back, so no
other module builds wire dicts by hand.

- System, developer and tool messages carry a plain ``content: str`` (that is all the
  OpenAI wire format gives them); user and assistant messages carry typed ``contents``.
- Session-only messages (custom, branch summary) are never sent to the LLM; a
  :class:`CompactionSummaryMessage` is (see :mod:`pipeline.context.openai_messages`).

The modules: :mod:`~pipeline.messages.role`, :mod:`~pipeline.messages.mime` (magic-byte
sniffing), :mod:`~pipeline.messages.content`, :mod:`~pipeline.messages.usage` and
:mod:`~pipeline.messages.message`; every public name is re-exported here.
"""

from pipeline.messages.content import (
    AssistantContent,
    AudioContent,
    Content,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultContent,
    UserContent,
)
from pipeline.messages.message import (
    DEFAULT_SUMMARY_TEMPLATE,
    AssistantMessage,
    BaseMessage,
    BranchSummaryMessage,
    CompactionSummaryMessage,
    CustomMessage,
    DeveloperMessage,
    LLMMessage,
    Message,
    SessionMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from pipeline.messages.mime import AUDIO_FORMATS, sniff_mime
from pipeline.messages.role import Role
from pipeline.messages.usage import Usage, UsageCost

# The old private name, still imported by pipeline.context.openai_messages.
_AUDIO_FORMATS = AUDIO_FORMATS

__all__ = [
    "AUDIO_FORMATS",
    "DEFAULT_SUMMARY_TEMPLATE",
    "AssistantContent",
    "AssistantMessage",
    "AudioContent",
    "BaseMessage",
    "BranchSummaryMessage",
    "CompactionSummaryMessage",
    "Content",
    "CustomMessage",
    "DeveloperMessage",
    "ImageContent",
    "LLMMessage",
    "Message",
    "Role",
    "SessionMessage",
    "SystemMessage",
    "TextContent",
    "ThinkingContent",
    "ToolCallContent",
    "ToolMessage",
    "ToolResultContent",
    "Usage",
    "UsageCost",
    "UserContent",
    "UserMessage",
    "sniff_mime",
]
