"""What a telephony provider's media stream says, whatever the provider: the call's start,
the caller's audio (16 kHz mono s16), a key pressed, a mark played, the end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class StreamProtocolError(ValueError):
    """A message the provider's protocol does not allow; the reason closes the socket."""


@dataclass(frozen=True, slots=True)
class StreamStarted:
    stream_id: str
    call_id: str
    encoding: str  # "mulaw", "alaw" or "pcm"
    sample_rate: int
    parameters: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StreamAudio:
    pcm: bytes  # 16 kHz mono s16


@dataclass(frozen=True, slots=True)
class StreamDtmf:
    digit: str


@dataclass(frozen=True, slots=True)
class StreamMarkPlayed:
    name: str


@dataclass(frozen=True, slots=True)
class StreamStopped:
    pass


StreamEvent = StreamStarted | StreamAudio | StreamDtmf | StreamMarkPlayed | StreamStopped


class ProviderStream(Protocol):
    """One call's media stream in one provider's dialect: what comes in as events, what we
    send as the provider's messages. One instance per call (it keeps the codec state)."""

    provider: str  # "twilio", "telnyx", ...
    stream_id: str | None  # set by the start message
    oversized: int  # media messages longer than the provider's own, dropped undecoded

    def parse(self, message: str | bytes) -> StreamEvent | None:
        """One WebSocket message (text or binary): its event, or None (nothing to act on).
        Raises :class:`StreamProtocolError` with the reason to close with."""
        ...

    def media(self, pcm: bytes, sample_rate: int) -> str | bytes:
        """Our audio (mono s16 at ``sample_rate``, 20 ms) as one message."""
        ...

    def mark(self, name: str) -> str | bytes | None:
        """A marker the provider echoes back once the audio before it has played; None if
        the provider has none."""
        ...

    def clear(self) -> str | bytes | None:
        """Drop the audio the provider has buffered (a barge-in); None if it cannot."""
        ...
