"""Plivo Audio Streams, bidirectional (``<Stream bidirectional="true">``): the JSON
messages of one call's WebSocket, both ways.

In: ``start`` first (no ``connected``; ``start.streamId``, ``start.callId``,
``start.mediaFormat``: ``audio/x-mulaw`` at 8 kHz; ``extra_headers``, a string), ``media``
(base64 μ-law), ``dtmf``, ``playedStream`` (a checkpoint we sent was played; its ``name``
at the top level) and ``clearedAudio`` (our ``clearAudio`` took effect). Plivo documents no
``stop`` (the socket closes); one is taken as the end all the same.
Out: ``playAudio`` (``media``: ``contentType``, ``sampleRate``, ``payload``),
``checkpoint`` and ``clearAudio``, each naming the stream.
Wire format: https://www.plivo.com/docs/voice/audio-streaming/audio-streaming
"""

from __future__ import annotations

from typing import Any

from server.telephony.json_messages import (
    JsonStream,
    call_identifier,
    identifier,
    section,
)
from server.telephony.stream_events import StreamProtocolError, StreamStarted

_CONTENT_TYPE = "audio/x-mulaw"


class PlivoStream(JsonStream):
    """One call's Plivo messages: :meth:`parse` what comes in, :meth:`media`,
    :meth:`mark` (a ``checkpoint``) and :meth:`clear` what goes out (JSON text)."""

    provider = "plivo"
    _quiet = frozenset({"clearedAudio"})
    _mark_event = "playedStream"
    _address = "streamId"
    _law = "mulaw"

    def _media_out(self, data: str) -> str:
        media = {"contentType": _CONTENT_TYPE, "sampleRate": 8000, "payload": data}
        return self._out("playAudio", media=media)

    def mark(self, name: str) -> str:
        """A ``checkpoint``: Plivo answers ``playedStream`` once what came before played."""
        return self._out("checkpoint", name=name)

    def clear(self) -> str:
        """``clearAudio``: Plivo drops what it has buffered (a barge-in)."""
        return self._out("clearAudio")

    def _start(self, body: dict[str, Any]) -> StreamStarted:
        start = section(body, "start")
        fmt = section(start, "mediaFormat", "start")
        if fmt.get("encoding") != _CONTENT_TYPE or fmt.get("sampleRate") != 8000:
            raise StreamProtocolError(f"unsupported media format {fmt!r}: {_CONTENT_TYPE} 8000")
        headers = body.get("extra_headers") or ""
        if not isinstance(headers, str):
            raise StreamProtocolError(f"extra_headers must be a string, not {headers!r}")
        return StreamStarted(
            stream_id=identifier(start.get("streamId"), "streamId"),
            call_id=call_identifier(start.get("callId"), "callId"),
            encoding="mulaw",
            sample_rate=8000,
            # Plivo passes the Stream's extraHeaders through as one string; its format
            # is the application's own, so it is kept whole.
            parameters={"extra_headers": headers} if headers else {},
        )

    def _mark_name(self, body: dict[str, Any]) -> str:
        name = body.get("name")
        if not isinstance(name, str):
            raise StreamProtocolError("'playedStream' without its name")
        return name
