"""Context aggregators: they turn what the user said and what the bot delivered into
messages in the LLM context, and decide when the LLM must run again."""

from pipeline.aggregators.assistant import AssistantAggregator
from pipeline.aggregators.text import join_text
from pipeline.aggregators.user import UserAggregator

__all__ = ["AssistantAggregator", "UserAggregator", "join_text"]
