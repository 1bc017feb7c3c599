"""Context aggregators: they turn what the user said and what the bot delivered into
messages in the LLM context, and decide when the LLM must run again."""

from pipeline.aggregators.assistant_messages import AssistantAggregator
from pipeline.aggregators.text_parts import join_text
from pipeline.aggregators.user_messages import UserAggregator

__all__ = ["AssistantAggregator", "UserAggregator", "join_text"]
