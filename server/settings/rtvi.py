"""What the RTVI client is sent beyond the protocol's core: audio levels, the bot's TTS
audio, the LLM's reasoning, the session's log lines, and the legacy function-call
message."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class RTVISettings(BaseModel):
    """The optional RTVI messages a session sends."""

    # Off by default, as in Pipecat: clients draw levels from their own tracks, and at 20
    # calls the messages (and the SCTP acks they bring back) cost a tenth of the loop.
    rtvi_audio_levels: bool = Field(
        False, description="Send user-audio-level and bot-audio-level (10 Hz, while speaking)."
    )
    rtvi_bot_tts_audio: bool = Field(
        False, description="Send the bot's TTS audio as bot-tts-audio messages (base64 PCM)."
    )
    rtvi_bot_llm_thoughts: bool = Field(
        True,
        description="Send the LLM's reasoning as server-message bot-llm-thought-* messages.",
    )
    rtvi_system_log: Literal["off", "TRACE", "DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "off",
        description="Forward the session's log lines at this level and above as "
        "system-log messages (they can hold private data).",
    )
    rtvi_legacy_function_call: bool = Field(
        False,
        description="Announce client-side tool calls with the deprecated llm-function-call "
        "instead of llm-function-call-in-progress (for clients that predate it).",
    )
