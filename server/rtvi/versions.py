"""RTVI 1.x and 2.x side by side: what differs between the two, in one place.

Each client is served the protocol its ``client-ready`` announced (:class:`ClientProtocol`;
1.x until it says otherwise). :mod:`server.rtvi.events` maps pipeline events to message
types once, for both; it asks here for whatever depends on the version:

- ``bot-ready``'s version: 1.4.0 or 2.1.0 (:func:`server.rtvi.protocol.served_version`);
- messages only 2.x defines (:data:`V2_ONLY`): the VAD's own ``vad-user-started-speaking``
  / ``vad-user-stopped-speaking``; a 1.x client never sees them;
- ``bot-output`` (:class:`BotOutput`). 1.x: ``{text, spoken, aggregated_by}`` once a
  sentence has played (on a barge-in, the words that went out), and each chunk of a text
  answer as it comes (``spoken: false``, ``"word"``). 2.x: per sentence, with a
  ``segment_id``: ``new`` as it starts to play, ``in-progress`` as playout reaches each of
  its words, ``completed`` once the last word plays (or the sentence has played, without
  word progress); a sentence cut short by a barge-in gets no ``completed``. A text answer
  goes out a sentence at a time with ``will_be_spoken: false`` and no status: 2.x has no
  word or token ``bot-output``;
- the client's ``dtmf`` (:meth:`ClientProtocol.takes_dtmf`), which only 2.x defines.

``bot-tts-text``, ``bot-transcription`` and ``bot-interrupted`` go to both alike.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pipeline.reply.sentences import SentenceAggregator
from server.rtvi.protocol import PROTOCOL_VERSION, served_version, version_major
from server.rtvi.server_messages import (
    BotOutputData,
    BotOutputV2Data,
    SpokenProgressData,
    TextData,
    build,
)

Send = Callable[[dict[str, Any]], None]
SpokenStatus = Literal["new", "in-progress", "completed"]

# Server messages a 1.x client is never sent.
V2_ONLY = frozenset({"vad-user-started-speaking", "vad-user-stopped-speaking"})
# A text answer is shown by the sentence: no first clause cut off at a comma (as for TTS).
WHOLE_SENTENCES = 10**6


class ClientProtocol:
    """The RTVI protocol one client is served; shared by its handler and its events."""

    def __init__(self) -> None:
        self.version = PROTOCOL_VERSION
        self.major = 1

    def negotiate(self, announced: str | None) -> str:
        """Serve what a ``client-ready`` announced from now on; returns the version told."""
        self.version = served_version(announced)
        self.major = version_major(self.version) or 1
        return self.version

    def sends(self, type_: str) -> bool:
        """Whether this client is sent messages of ``type_``."""
        return self.major >= 2 or type_ not in V2_ONLY

    @property
    def takes_dtmf(self) -> bool:
        return self.major >= 2


@dataclass(slots=True)
class _Segment:
    """A spoken sentence between ``new`` and ``completed`` (2.x)."""

    id: int
    text: str
    completed: bool = False


class BotOutput:
    """``bot-output`` and ``bot-transcription`` from the bot's text events, per version."""

    def __init__(self, client_protocol: ClientProtocol, send: Send) -> None:
        self.client_protocol = client_protocol
        self._send = send
        self._ids = itertools.count(1)
        self._segment: _Segment | None = None  # the spoken sentence playing (2.x)
        self._text_answer = SentenceAggregator(WHOLE_SENTENCES)  # its unsent part (2.x)

    def started(self, text: str) -> None:
        """A spoken sentence began to play."""
        if self.client_protocol.major < 2:
            return
        segment = self._segment = _Segment(next(self._ids), text)
        self._spoken(segment, "new", "")

    def progress(self, text: str, spoken: str) -> None:
        """Playout reached the word that ends ``spoken`` (a prefix of ``text``)."""
        segment = self._segment
        if self.client_protocol.major < 2 or segment is None or segment.text != text:
            return
        if segment.completed or not spoken:
            return
        done = not text[len(spoken) :].strip()
        segment.completed = done
        self._spoken(segment, "completed" if done else "in-progress", spoken)

    def played(self, text: str) -> None:
        """A spoken sentence has played, or was cut short (``text``: the words heard)."""
        if self.client_protocol.major < 2:
            data = BotOutputData(text=text, spoken=True, aggregated_by="sentence")
            self._send(build("bot-output", data))
        else:
            segment, self._segment = self._segment, None
            if segment is not None and segment.text == text and not segment.completed:
                self._spoken(segment, "completed", text)
        # What the bot's voice said, sentence by sentence (cut short on barge-in).
        self._send(build("bot-transcription", TextData(text=text)))

    def sent(self, text: str) -> None:
        """A chunk of a text answer (no audio) was sent."""
        if self.client_protocol.major < 2:
            data = BotOutputData(text=text, spoken=False, aggregated_by="word")
            self._send(build("bot-output", data))
            return
        for sentence in self._text_answer.push(text):
            self._unspoken(sentence)

    def text_ended(self) -> None:
        """The LLM's answer ended or was cut off: the rest of a text answer goes out (2.x)."""
        rest = self._text_answer.flush()
        if rest:
            self._unspoken(rest)

    def _spoken(self, segment: _Segment, status: SpokenStatus, heard: str) -> None:
        progress = SpokenProgressData(
            accumulated_text=heard, remaining_text=segment.text[len(heard) :]
        )
        data = BotOutputV2Data(
            text=segment.text,
            aggregated_by="sentence",
            will_be_spoken=True,
            segment_id=segment.id,
            spoken_status=status,
            spoken_progress=progress,
        )
        self._send(build("bot-output", data))

    def _unspoken(self, sentence: str) -> None:
        data = BotOutputV2Data(
            text=sentence,
            aggregated_by="sentence",
            will_be_spoken=False,
            segment_id=next(self._ids),
        )
        self._send(build("bot-output", data))
