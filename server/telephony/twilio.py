"""Twilio Media Streams, bidirectional (``<Connect><Stream>``): the JSON messages of one
call's WebSocket, both ways.

In: ``connected``, then ``start`` (``streamSid``, ``callSid``, ``customParameters``,
``mediaFormat``: ``audio/x-mulaw`` at 8 kHz), ``media`` (base64 μ-law, 20 ms a message),
``dtmf``, ``mark`` (audio we sent up to a mark was played) and ``stop``. Out: ``media``,
``mark`` and ``clear`` (drop the audio Twilio has buffered: a barge-in).
Wire format: https://www.twilio.com/docs/voice/media-streams/websocket-messages
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

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

MAX_MESSAGE = 64 * 1024  # characters; a 20 ms media message is about 300
_FORMATS = {"audio/x-mulaw": "mulaw"}
_DTMF = set("0123456789*#ABCD")


class TwilioStream:
    """One call's Twilio messages: :meth:`parse` what comes in, :meth:`media`,
    :meth:`mark` and :meth:`clear` what goes out (JSON text)."""

    def __init__(self) -> None:
        self.stream_id: str | None = None
        self._decoder = G711Decoder("mulaw")
        self._encoder = G711Encoder("mulaw")

    def parse(self, text: str) -> StreamEvent | None:
        """One message from Twilio: its event, or None (``connected``)."""
        message = _load(text)
        kind = message.get("event")
        if kind == "connected":
            return None
        if kind == "start":
            return self._start(message)
        if self.stream_id is None:
            raise StreamProtocolError(f"{kind!r} before start")
        if kind == "media":
            return StreamAudio(self._decoder.decode(_payload(message)))
        if kind == "dtmf":
            digit = _field(message, "dtmf", "digit")
            if digit not in _DTMF:
                raise StreamProtocolError(f"not a DTMF digit: {digit!r}")
            return StreamDtmf(digit)
        if kind == "mark":
            return StreamMarkPlayed(_field(message, "mark", "name"))
        if kind == "stop":
            return StreamStopped()
        raise StreamProtocolError(f"unknown event {kind!r}")

    def media(self, pcm: bytes, sample_rate: int) -> str:
        """Our audio (mono s16 at ``sample_rate``) as one ``media`` message."""
        payload = base64.b64encode(self._encoder.encode(pcm, sample_rate)).decode()
        return self._out("media", media={"payload": payload})

    def mark(self, name: str) -> str:
        """A ``mark``: Twilio sends it back once the audio before it has played."""
        return self._out("mark", mark={"name": name})

    def clear(self) -> str:
        """``clear``: Twilio drops what it has buffered (a barge-in)."""
        return self._out("clear")

    def _start(self, message: dict[str, Any]) -> StreamStarted:
        if self.stream_id is not None:
            raise StreamProtocolError("a second start")
        start = message.get("start")
        if not isinstance(start, dict):
            raise StreamProtocolError("start without its 'start' object")
        fmt = start.get("mediaFormat") or {}
        encoding = _FORMATS.get(fmt.get("encoding", ""))
        if encoding is None or fmt.get("sampleRate") != 8000:
            raise StreamProtocolError(f"unsupported media format {fmt!r}: audio/x-mulaw 8000")
        stream_id = start.get("streamSid") or message.get("streamSid")
        if not isinstance(stream_id, str) or not stream_id:
            raise StreamProtocolError("start without a streamSid")
        params = start.get("customParameters") or {}
        self.stream_id = stream_id
        return StreamStarted(
            stream_id=stream_id,
            call_id=str(start.get("callSid", "")),
            encoding=encoding,
            sample_rate=8000,
            parameters={str(k): str(v) for k, v in params.items()},
        )

    def _out(self, event: str, **body: Any) -> str:
        if self.stream_id is None:
            raise StreamProtocolError("nothing can be sent before start")
        return json.dumps({"event": event, "streamSid": self.stream_id, **body})


def _load(text: str) -> dict[str, Any]:
    if len(text) > MAX_MESSAGE:
        raise StreamProtocolError(f"message over {MAX_MESSAGE} characters")
    try:
        message = json.loads(text)
    except ValueError as exc:
        raise StreamProtocolError(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise StreamProtocolError("a message must be a JSON object")
    return message


def _field(message: dict[str, Any], outer: str, inner: str) -> str:
    body = message.get(outer)
    value = body.get(inner) if isinstance(body, dict) else None
    if not isinstance(value, str):
        raise StreamProtocolError(f"{message.get('event')!r} without {outer}.{inner}")
    return value


def _payload(message: dict[str, Any]) -> bytes:
    try:
        return base64.b64decode(_field(message, "media", "payload"), validate=True)
    except binascii.Error as exc:
        raise StreamProtocolError(f"media payload is not base64: {exc}") from None
