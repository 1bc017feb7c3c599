"""The live STT interface: one stream per call, fed the call's audio as it arrives.

A streaming vendor (Deepgram, AssemblyAI, OpenAI's realtime transcription) hears the
audio while it is spoken, so its words are ready moments after the speech ends instead
of a whole request later. The transcriber still cuts the utterances at Parley's VAD
(:mod:`pipeline.hearing.transcriber`): it :meth:`~LiveSTTStream.send`\\ s each
utterance's frames (the pre-roll first) while it records, and at the VAD's pause or stop
asks :meth:`~LiveSTTStream.finalize` for the words of everything sent so far. The
vendor's own turn signals arrive as :class:`Words` with ``end_of_speech`` set: one more
cue, never a turn's end by itself (Parley's backchannel and echo judgements still hold).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pipeline.services.stt import STTService, Transcript


@dataclass(frozen=True, slots=True)
class Word:
    """One recognised word; ``start``/``end``: seconds into the audio the stream was sent
    (across reconnects too), when the vendor says."""

    text: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Words:
    """A vendor's result: ``final`` words will not change; interim ones may.
    ``end_of_speech``: the vendor thinks the speaker is done (its endpointing)."""

    text: str
    final: bool
    words: tuple[Word, ...] = ()
    end_of_speech: bool = False
    language: str | None = None


class LiveSTTStream(Protocol):
    """One call's live transcription.

    :meth:`send` never blocks (the audio is queued, within a bound). :meth:`finalize`
    returns the final words of all audio sent since the previous finalize returned, once
    the vendor has confirmed that it heard all of it; a cancelled finalize loses nothing
    (its words come with the next one). A failed one raises a
    :class:`~pipeline.services.errors.ServiceError` and forgets that audio's words: the
    caller transcribes it elsewhere (a fallback) from its own recording.
    """

    def send(self, pcm: bytes) -> None:
        """16 kHz mono s16le, any length."""
        ...

    def finalize(self) -> Awaitable[Transcript]:
        """Asks now, for exactly the audio sent so far; await the result for the words."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class LiveSTTService(STTService, Protocol):
    """An STT that opens one :class:`LiveSTTStream` per call; it still transcribes a
    whole utterance (:meth:`transcribe`) for callers that have only that."""

    def open_live(self, on_words: Callable[[Words], None] | None = None) -> LiveSTTStream: ...
