"""What a telephony provider's media stream says, whatever the provider: the call's start,
the caller's audio (16 kHz mono s16), a key pressed, a mark played, the end."""

from __future__ import annotations

from dataclasses import dataclass, field


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
