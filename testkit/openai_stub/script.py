"""What a test scripts into the stub, and what it records: replies, tool calls, config.

Faults are in :mod:`testkit.openai_stub.faults`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

TTS_RATE = 24000
Endpoint = Literal["chat", "stt", "tts"]


@dataclass(frozen=True)
class ToolCall:
    """A scripted tool call; ``arguments`` as a string is sent verbatim (bad JSON too)."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str = ""  # default: call_<index>


@dataclass(frozen=True)
class ChatReply:
    """A scripted chat answer: reasoning, text, then tool calls (their fragments
    interleaved). ``reasoning`` streams first, in the delta field ``reasoning_field``
    (``reasoning_content`` as vLLM, llama.cpp and DeepSeek send it; ``reasoning`` as
    others do)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str = ""
    reasoning_field: str = "reasoning_content"


@dataclass
class StubConfig:
    """Delays (seconds) and defaults; change fields at any time, per test."""

    first_token_delay: float = 0.0
    token_delay: float = 0.0
    stt_delay: float = 0.0
    tts_first_audio_delay: float = 0.0
    tts_chunk_delay: float = 0.0
    tts_chunk_bytes: int = 4801  # odd on purpose: samples straddle chunk boundaries
    tts_seconds_per_char: float = 0.01
    tts_min_seconds: float = 0.1
    # What the speech endpoint says: "buzz" (a pulse train, see audio.buzz), "speech"
    # (a recorded voice, for benches whose cost depends on it: Opus, the echo path) or
    # "tone" (a steady 220 Hz sine: an envelope that never moves).
    tts_voice: str = "buzz"
    default_text: str = "Hello there! How can I help you today?"
    transcript: str = "hello world"
    # When set, what the STT "hears": called with the uploaded audio file's bytes.
    transcriber: Callable[[bytes], str] | None = None
    api_key: str | None = "sk-stub"  # None accepts any key
    max_hang: float = 30.0


@dataclass
class RecordedRequest:
    """What the client sent. ``body``: the JSON, or multipart fields (files as bytes)."""

    path: str
    headers: dict[str, str]
    body: Any
    completed: bool = False  # the whole response went out
    disconnected: bool = False  # the client left before the response ended
