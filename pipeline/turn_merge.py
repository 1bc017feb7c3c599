"""Taking back a user turn that was ended too early, with the start of its answer.

When the user goes on right after their turn was ended and answering began, the turn
was not over: its message, and what the bot had started to say in reply, come out of
the context, and the turn's words begin the turn in progress. The context then never
holds half a turn and its premature answer.
"""

from __future__ import annotations

from pipeline.context import LLMContext
from pipeline.messages import AssistantMessage, Message, SystemMessage, UserMessage


def take_back_turn(context: LLMContext, user_message: Message) -> tuple[str, str] | None:
    """Remove ``user_message`` and the reply after it from ``context``.

    Returns ``(user text, assistant text)``, or ``None`` (and changes nothing) when the
    message is not in the context or anything but plain assistant text (and system
    notes, such as the ``<ui_state>``) followed it: a reply that called tools has acted
    on the turn, and is not taken back.
    """
    messages = context.messages
    index = next((i for i, m in enumerate(messages) if m is user_message), None)
    if index is None or not isinstance(user_message, UserMessage):
        return None
    after = messages[index + 1 :]
    replies = [m for m in after if isinstance(m, AssistantMessage)]
    if any(m.tool_calls() for m in replies) or any(
        not isinstance(m, AssistantMessage | SystemMessage) for m in after
    ):
        return None
    kept = messages[:index] + [m for m in after if isinstance(m, SystemMessage)]
    context.set_messages(kept)
    answer = " ".join(m.text_content() for m in replies if m.text_content())
    return user_message.text_content(), answer
