"""Twilio Media Streams, bidirectional (``<Connect><Stream>``): the JSON messages of one
call's WebSocket, both ways.

In: ``connected``, then ``start`` (``streamSid``, ``callSid``, ``customParameters``,
``mediaFormat``: ``audio/x-mulaw`` at 8 kHz), ``media`` (base64 μ-law, 20 ms a message),
``dtmf``, ``mark`` (audio we sent up to a mark was played) and ``stop``. Out: ``media``,
``mark`` and ``clear`` (drop the audio Twilio has buffered: a barge-in).
Wire format: https://www.twilio.com/docs/voice/media-streams/websocket-messages
"""

from __future__ import annotations

from typing import Any

from server.telephony.json_messages import (
    MAX_MESSAGE,
    JsonStream,
    call_identifier,
    identifier,
    parameters,
    section,
)
from server.telephony.stream_events import StreamProtocolError, StreamStarted

__all__ = ["MAX_MESSAGE", "TwilioStream"]


class TwilioStream(JsonStream):
    """One call's Twilio messages: :meth:`parse` what comes in, :meth:`media`,
    :meth:`mark` and :meth:`clear` what goes out (JSON text, each naming the stream)."""

    provider = "twilio"
    _address = "streamSid"
    _law = "mulaw"

    def _start(self, body: dict[str, Any]) -> StreamStarted:
        start = section(body, "start")
        fmt = section(start, "mediaFormat", "start")
        if fmt.get("encoding") != "audio/x-mulaw" or fmt.get("sampleRate") != 8000:
            raise StreamProtocolError(f"unsupported media format {fmt!r}: audio/x-mulaw 8000")
        return StreamStarted(
            stream_id=identifier(start.get("streamSid") or body.get("streamSid"), "streamSid"),
            call_id=call_identifier(start.get("callSid"), "callSid"),
            encoding="mulaw",
            sample_rate=8000,
            parameters=parameters(start.get("customParameters")),
        )
