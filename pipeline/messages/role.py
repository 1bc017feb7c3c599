"""Who a message is from."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """Who a message is from; the last three never reach the LLM as themselves."""

    SYSTEM = "system"
    DEVELOPER = "developer"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    CUSTOM = "custom"
    BRANCH_SUMMARY = "branch_summary"
    COMPACTION_SUMMARY = "compaction_summary"
