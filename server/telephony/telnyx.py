"""Telnyx Media Streaming over WebSockets, bidirectional (``stream_bidirectional_mode``
``rtp``): the JSON messages of one call's WebSocket, both ways.

In: ``connected``, then ``start`` (``stream_id`` at the top level; ``start.call_control_id``,
``start.custom_parameters``, ``start.media_format``: PCMU or PCMA at 8 kHz, mono), ``media``
(base64 RTP payload, no header; ``media.track`` inbound, or outbound when both tracks are
streamed), ``dtmf``, ``mark`` (a mark we sent was played), ``error`` and ``stop``.
Out: ``media``, ``mark`` and ``clear``; unlike Twilio's, they carry no stream id.

What we send is in the call's ``stream_bidirectional_codec``, which Telnyx defaults to
PCMU whatever the caller's codec: hence ``reply_codec``, not the start's encoding.
Wire format: https://developers.telnyx.com/api-reference/websockets/stream-call-media-over-websocket
"""

from __future__ import annotations

from typing import Any

from server.telephony.g711 import G711Decoder, G711Encoder
from server.telephony.json_messages import (
    JsonStream,
    call_identifier,
    identifier,
    parameters,
    section,
)
from server.telephony.stream_events import StreamEvent, StreamProtocolError, StreamStarted

_LAWS = {"PCMU": "mulaw", "PCMA": "alaw"}


class TelnyxStream(JsonStream):
    """One call's Telnyx messages: :meth:`parse` what comes in, :meth:`media`,
    :meth:`mark` and :meth:`clear` what goes out (JSON text).

    ``reply_codec`` is the codec Telnyx expects back (the streaming command's
    ``stream_bidirectional_codec``): ``"PCMU"`` (Telnyx's default) or ``"PCMA"``."""

    provider = "telnyx"

    def __init__(self, reply_codec: str = "PCMU") -> None:
        super().__init__()
        if reply_codec not in _LAWS:
            raise ValueError(f"Telnyx reply codec {reply_codec!r}: PCMU or PCMA")
        self._encoder = G711Encoder(_LAWS[reply_codec])

    def _start(self, body: dict[str, Any]) -> StreamStarted:
        start = section(body, "start")
        fmt = section(start, "media_format", "start")
        encoding = fmt.get("encoding")
        law = _LAWS.get(encoding) if isinstance(encoding, str) else None
        if law is None or fmt.get("sample_rate") != 8000 or fmt.get("channels", 1) != 1:
            raise StreamProtocolError(f"unsupported media format {fmt!r}: PCMU or PCMA, 8000, mono")
        self._decoder = G711Decoder(law)
        return StreamStarted(
            stream_id=identifier(body.get("stream_id"), "stream_id"),
            call_id=call_identifier(start.get("call_control_id"), "call_control_id"),
            encoding=law,
            sample_rate=8000,
            parameters=parameters(start.get("custom_parameters")),
        )

    def _other(self, kind: str, body: dict[str, Any]) -> StreamEvent | None:
        if kind == "error":
            error = body.get("payload")
            detail = error.get("detail", error) if isinstance(error, dict) else error
            raise StreamProtocolError(f"Telnyx reports an error: {detail}")
        return super()._other(kind, body)
