"""The JSON media-stream dialect Twilio set and Telnyx, Plivo and Exotel follow, with their
own names: text messages with an ``event``, a ``start`` naming the stream and its audio
format, then ``media`` (base64 audio), ``dtmf``, a played-mark echo and ``stop``.

:class:`JsonStream` is that shape once; a provider's class says its field names, its
codec and its start. The helpers read one message strictly: anything the provider's
protocol does not allow raises :class:`StreamProtocolError` with the reason.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Any, Protocol

from server.guards import client_json
from server.telephony.g711 import G711Decoder, G711Encoder
from server.telephony.stream_events import (
    StreamAudio,
    StreamDtmf,
    StreamEvent,
    StreamMarkPlayed,
    StreamProtocolError,
    StreamStarted,
    StreamStopped,
)

MAX_MESSAGE = 64 * 1024  # characters (bytes for binary); a 20 ms media message is about 300
MAX_ID = 128  # characters of a stream's or a call's id; Twilio's are 34
_DTMF = set("0123456789*#ABCD")
_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_ID}}}")  # printable ASCII, no spaces
_BYTES_PER_SAMPLE = {"mulaw": 1, "alaw": 1, "pcm": 2}


def load(message: str | bytes, provider: str) -> dict[str, Any]:
    """One text message as its JSON object: strict JSON, nested at most
    :data:`server.guards.client_json.MAX_DEPTH` levels (a deep one is refused unparsed)."""
    if not isinstance(message, str):
        raise StreamProtocolError(f"{provider} sends text messages only, not binary")
    if len(message) > MAX_MESSAGE:
        raise StreamProtocolError(f"message over {MAX_MESSAGE} characters")
    try:
        body = client_json.loads(message)
    except (ValueError, RecursionError) as exc:
        raise StreamProtocolError(f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise StreamProtocolError("a message must be a JSON object")
    return body


def event_name(body: dict[str, Any], key: str = "event") -> str:
    """What kind of message ``body`` is (its ``event``)."""
    kind = body.get(key)
    if not isinstance(kind, str):
        raise StreamProtocolError(f"a message without its {key!r} name")
    return kind


def field(body: dict[str, Any], outer: str, inner: str) -> str:
    """``body[outer][inner]``, a string."""
    part = body.get(outer)
    value = part.get(inner) if isinstance(part, dict) else None
    if not isinstance(value, str):
        raise StreamProtocolError(f"{body.get('event')!r} without {outer}.{inner}")
    return value


def section(body: dict[str, Any], key: str, owner: str | None = None) -> dict[str, Any]:
    """``body[key]``, an object (``owner`` names ``body`` in the reason, if not an event)."""
    part = body.get(key)
    if not isinstance(part, dict):
        raise StreamProtocolError(f"{owner or repr(body.get('event'))} without its {key!r} object")
    return part


def payload(body: dict[str, Any], max_bytes: int) -> bytes | None:
    """The audio bytes of a ``media`` message (``media.payload``, base64); None when they
    are over ``max_bytes`` (a longer text is not even decoded)."""
    text = field(body, "media", "payload")
    if len(text) > math.ceil(max_bytes / 3) * 4:
        return None
    try:
        data = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise StreamProtocolError(f"media payload is not base64: {exc}") from None
    return data if len(data) <= max_bytes else None


def audio_bytes(encoding: str, sample_rate: int, seconds: float) -> int:
    """How many bytes ``seconds`` of mono audio take in ``encoding`` at ``sample_rate``."""
    return math.ceil(sample_rate * seconds) * _BYTES_PER_SAMPLE[encoding]


def number(value: object, max_digits: int) -> int | None:
    """A count written as ASCII digits (at most ``max_digits``; a JSON integer too), else
    None: ``str.isdigit`` also takes ``'²'``, which ``int`` refuses."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value < 10**max_digits else None
    if isinstance(value, str) and 0 < len(value) <= max_digits and value.isascii():
        return int(value) if value.isdigit() else None
    return None


def digit(value: object) -> str:
    """A key of the phone's keypad (0-9, *, #, A-D)."""
    if not isinstance(value, str) or value not in _DTMF:
        raise StreamProtocolError(f"not a DTMF digit: {value!r}")
    return value


def identifier(value: object, what: str) -> str:
    """A start's non-empty id (``what`` names its field in the reason): printable ASCII
    of at most :data:`MAX_ID` characters."""
    if not isinstance(value, str) or not value:
        raise StreamProtocolError(f"start without a {what}")
    if not _ID.fullmatch(value):
        raise StreamProtocolError(f"a {what} must be printable ASCII of 1 to {MAX_ID} characters")
    return value


def call_identifier(value: object, what: str) -> str:
    """A start's call id, which a provider may leave out (then ""); else as :func:`identifier`."""
    return "" if value is None or value == "" else identifier(value, what)


def parameters(value: object) -> dict[str, str]:
    """A provider's custom parameters (an object, or absent), as strings."""
    if value is None or value == "":
        return {}
    if not isinstance(value, dict):
        raise StreamProtocolError(f"custom parameters must be an object, not {value!r}")
    return {str(k): str(v) for k, v in value.items()}


class Decoder(Protocol):
    def decode(self, data: bytes) -> bytes: ...


class Encoder(Protocol):
    def encode(self, pcm: bytes, sample_rate: int) -> bytes: ...


class JsonStream:
    """One call in a JSON dialect: :meth:`parse` what comes in, :meth:`media`,
    :meth:`mark` and :meth:`clear` what goes out. A subclass names the provider, sets
    its G.711 ``_law``, or sets ``_decoder``/``_encoder`` itself (at the latest in its
    :meth:`_start`), and reads its start."""

    provider = ""
    _quiet: frozenset[str] = frozenset({"connected"})  # events with nothing to act on
    _mark_event = "mark"  # the provider's echo of a mark we sent
    _address: str | None = None  # the key naming the stream in what we send, if any
    _law: str | None = None  # "mulaw" or "alaw", if fixed for the provider
    # The longest media message taken, in seconds: the provider's own (20 ms) with slack.
    # A longer one is dropped before it is decoded (base64, G.711, resampling), counted.
    _max_media_seconds = 0.1
    _decoder: Decoder
    _encoder: Encoder

    def __init__(self) -> None:
        self.stream_id: str | None = None
        self.oversized = 0  # media messages dropped unread for their length
        self._max_payload = 0
        if self._law is not None:
            self._decoder = G711Decoder(self._law)
            self._encoder = G711Encoder(self._law)

    def parse(self, message: str | bytes) -> StreamEvent | None:
        """One message from the provider: its event, or None (nothing to act on)."""
        body = load(message, self.provider)
        kind = event_name(body)
        if kind in self._quiet:
            return None
        if kind == "start":
            if self.stream_id is not None:
                raise StreamProtocolError("a second start")
            started = self._start(body)
            self.stream_id = started.stream_id
            seconds = self._max_media_seconds
            self._max_payload = audio_bytes(started.encoding, started.sample_rate, seconds)
            return started
        if self.stream_id is None:
            raise StreamProtocolError(f"{kind!r} before start")
        if kind == "media":
            return self._media(body)
        if kind == "dtmf":
            return StreamDtmf(digit(section(body, "dtmf").get("digit")))
        if kind == self._mark_event:
            return StreamMarkPlayed(self._mark_name(body))
        if kind == "stop":
            return StreamStopped()
        return self._other(kind, body)

    def media(self, pcm: bytes, sample_rate: int) -> str:
        """Our audio (mono s16 at ``sample_rate``) as one ``media`` message."""
        self._started()
        data = self._encoder.encode(pcm, sample_rate)
        return self._media_out(base64.b64encode(data).decode())

    def mark(self, name: str) -> str:
        """A ``mark``: the provider sends it back once the audio before it has played."""
        return self._out("mark", mark={"name": name})

    def clear(self) -> str:
        """``clear``: the provider drops what it has buffered (a barge-in)."""
        return self._out("clear")

    def _start(self, body: dict[str, Any]) -> StreamStarted:
        raise NotImplementedError

    def _media(self, body: dict[str, Any]) -> StreamAudio | None:
        track = section(body, "media").get("track", "inbound")
        if track == "outbound":  # our own audio, when the stream carries both tracks
            return None
        if track != "inbound":
            raise StreamProtocolError(f"media on an unknown track {track!r}")
        data = payload(body, self._max_payload)
        if data is None:
            self.oversized += 1
            return None
        return StreamAudio(self._decoder.decode(data))

    def _media_out(self, data: str) -> str:
        return self._out("media", media={"payload": data})

    def _mark_name(self, body: dict[str, Any]) -> str:
        return field(body, "mark", "name")

    def _other(self, kind: str, body: dict[str, Any]) -> StreamEvent | None:
        raise StreamProtocolError(f"unknown event {kind!r}")

    def _started(self) -> str:
        if self.stream_id is None:
            raise StreamProtocolError("nothing can be sent before start")
        return self.stream_id

    def _out(self, event: str, **body: Any) -> str:
        stream_id = self._started()
        address = {self._address: stream_id} if self._address else {}
        return json.dumps({"event": event, **address, **body})
