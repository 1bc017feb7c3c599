"""Hostile-client budgets (docs/security.md): what a peer may put into a
conversation: typed turns, the context and the store.

The context's own budget is ``context_max_tokens`` (:mod:`server.settings.bot`);
it now holds whenever the context grows, not only before an LLM run. These bound the rest:
how often typed text may ask for an answer, what one call may write to the transcript
store, and how much of the transcript a session's description carries.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class ConversationLimitSettings(BaseModel):
    """What a peer may put into a conversation: typed turns, the context and the store."""

    typed_turn_window: float = Field(
        0.3,
        ge=0,
        le=5,
        description="Seconds a typed turn waits for more send-text (merged into one turn and "
        "one LLM request); 0: answered at once.",
    )
    typed_turn_rate: float = Field(
        1.0, gt=0, description="send-text asking for an answer, per second per session."
    )
    typed_turn_burst: int = Field(
        10, ge=1, description="send-text asking for an answer at once; past it error-response."
    )
    max_record_bytes: int = Field(
        1_048_576,
        ge=4096,
        description="Bytes of turns and events one call may write to the transcript store; "
        "past it they are counted, not written, and the record is marked truncated.",
    )
    max_record_entries: int = Field(
        5000, ge=10, description="Turns and events one call may write to the store (as above)."
    )
    info_transcript_messages: int = Field(
        50, ge=1, description="Latest transcript messages a session's description carries."
    )
    info_transcript_bytes: int = Field(
        8192,
        ge=1024,
        description="Bytes of transcript text a session's description carries (escaped as "
        "ASCII JSON, up to three times as many: session-info must fit 64 KB).",
    )
