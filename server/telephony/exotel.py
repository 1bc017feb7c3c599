"""Exotel AgentStream, the Voicebot applet's bidirectional stream: the JSON messages of one
call's WebSocket, both ways.

In: ``connected``, then ``start`` (``stream_sid``, ``start.call_sid``,
``start.custom_parameters``, ``start.media_format``: raw 16-bit little-endian PCM,
``sample_rate`` a string, 8000 by default, 16000 or 24000 when the applet URL asks),
``media`` (base64 PCM, about 100 ms a message), ``dtmf``, ``mark`` (a mark we sent was
played) and ``stop``. Out: ``media`` (base64 PCM at the stream's rate), ``mark`` and
``clear``, each naming the stream.

Exotel plays what we send in chunks that must be whole multiples of 320 bytes (a shorter
tail is played with a gap after it); it recommends 100 ms or more a message.
Wire format: https://developer.exotel.com/docs/agentstream/websocket-protocol
"""

from __future__ import annotations

from typing import Any

from server.telephony.json_messages import (
    JsonStream,
    call_identifier,
    identifier,
    number,
    parameters,
    section,
)
from server.telephony.linear_pcm import PcmDecoder, PcmEncoder
from server.telephony.stream_events import StreamProtocolError, StreamStarted

# "audio/x-raw" in the current documentation; "base64" in older streams and examples.
_ENCODINGS = {"audio/x-raw", "raw/slin", "base64"}
_RATES = {8000, 16000, 24000}
CHUNK = 320  # bytes: what we send is a whole number of these


class ExotelStream(JsonStream):
    """One call's Exotel messages: :meth:`parse` what comes in, :meth:`media`,
    :meth:`mark` and :meth:`clear` what goes out (JSON text)."""

    provider = "exotel"
    _address = "stream_sid"
    _max_media_seconds = 0.5  # Exotel sends about 100 ms a message

    def _start(self, body: dict[str, Any]) -> StreamStarted:
        start = section(body, "start")
        fmt = section(start, "media_format", "start")
        # A string ("8000"), though some streams send a number.
        encoding, rate = fmt.get("encoding"), number(fmt.get("sample_rate"), 6)
        if not (isinstance(encoding, str) and encoding in _ENCODINGS) or rate not in _RATES:
            raise StreamProtocolError(
                f"unsupported media format {fmt!r}: 16-bit PCM at 8000, 16000 or 24000"
            )
        self._decoder = PcmDecoder(rate)
        self._encoder = PcmEncoder(rate, CHUNK)
        stream_id = start.get("stream_sid") or body.get("stream_sid")
        return StreamStarted(
            stream_id=identifier(stream_id, "stream_sid"),
            call_id=call_identifier(start.get("call_sid"), "call_sid"),
            encoding="pcm",
            sample_rate=rate,
            parameters=parameters(start.get("custom_parameters")),
        )
