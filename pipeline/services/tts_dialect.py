"""A WebSocket voice's wire protocol, as :mod:`pipeline.services.socket_tts` speaks it:
the :class:`TTSDialect` a vendor implements, and the signals it reads from the vendor's
messages."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Protocol

from pipeline.services.errors import ServiceError
from pipeline.services.vendor_socket import Message


@dataclass(frozen=True, slots=True)
class Audio:
    """Audio of the sentence being spoken in ``context`` (None: the only one)."""

    context: str | None
    pcm: bytes


@dataclass(frozen=True, slots=True)
class Timestamps:
    """Words of ``context``'s audio: (word, start, end), in seconds from the start of
    the context's audio (all its sentences so far)."""

    context: str | None
    words: tuple[tuple[str, float, float], ...]


@dataclass(frozen=True, slots=True)
class Done:
    """The flush of ``context``'s latest sentence is done: its audio is all in.
    ``cleared``: the answer to a cancel instead (a vendor without contexts)."""

    context: str | None
    cleared: bool = False


@dataclass(frozen=True, slots=True)
class Failed:
    """The vendor reported an error: for ``context``, or (None) for the socket."""

    context: str | None
    error: ServiceError


TTSSignal = Audio | Timestamps | Done | Failed


def pcm_from_base64(data: object) -> bytes:
    """A vendor's base64 audio field as bytes (nothing for a missing or bad one)."""
    if not isinstance(data, str) or not data:
        return b""
    try:
        return base64.b64decode(data, validate=False)
    except ValueError:
        return b""


class TTSDialect(Protocol):
    """One vendor's wire protocol for one connection. Audio comes back as 16-bit PCM at
    ``sample_rate``."""

    url: str
    headers: dict[str, str]
    multiplexed: bool
    keepalive_seconds: float | None

    def opening(self) -> list[Message]: ...

    def speak(self, context: str, text: str, first: bool) -> list[Message]:
        """One sentence of ``context`` and its flush; ``first``: the context is new on
        this socket."""
        ...

    def cancel(self, context: str) -> list[Message]: ...

    def end(self, context: str) -> list[Message]:
        """No more text for ``context`` (its last sentence is done)."""
        ...

    def keepalive(self) -> Message | None: ...

    def closing(self) -> Message | None: ...

    def read(self, message: Message) -> list[TTSSignal]: ...
