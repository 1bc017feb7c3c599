"""Vonage Voice API WebSockets (an NCCO ``connect`` to a ``websocket`` endpoint): one
call's messages, both ways.

In: first a text message, ``{"event": "websocket:connected", "content-type":
"audio/l16;rate=16000", ...}`` with the NCCO's ``headers`` merged into it (the oldest
streams leave ``event`` out); then binary frames of 16-bit little-endian PCM at that rate,
20 ms each (640 bytes at 16 kHz), and text events: ``websocket:dtmf`` (``digit``),
``websocket:notify`` (a ``notify`` we sent was reached) and ``websocket:cleared``.
Out: binary PCM frames at the same rate, exactly 20 ms each; text ``{"action": "clear"}``
and ``{"action": "notify", "payload": ...}``, which Vonage echoes as ``websocket:notify``
once the audio before it has played: our marks.

Nothing names the stream: the call's uuid does if the NCCO puts one in its headers
(``call_uuid``, ``uuid`` or ``conversation_uuid``), else one is made up at connect.
Wire format: https://developer.vonage.com/en/voice/voice-api/concepts/websockets
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from server.telephony.json_messages import (
    MAX_MESSAGE,
    audio_bytes,
    call_identifier,
    digit,
    event_name,
    load,
)
from server.telephony.linear_pcm import PcmDecoder, PcmEncoder
from server.telephony.stream_events import (
    StreamAudio,
    StreamDtmf,
    StreamEvent,
    StreamMarkPlayed,
    StreamProtocolError,
    StreamStarted,
)

CONNECTED = "websocket:connected"
MAX_AUDIO_SECONDS = 0.1  # the longest binary message taken: Vonage's 20 ms with slack
_CONTENT_TYPE = re.compile(r"audio/l16;\s*rate=(8000|16000|24000)", re.IGNORECASE)
_CALL_KEYS = ("call_uuid", "uuid", "conversation_uuid")


def is_opening(body: dict[str, Any]) -> bool:
    """Whether a text message is Vonage's first (the oldest streams' has no ``event``)."""
    return body.get("event") == CONNECTED or ("event" not in body and "content-type" in body)


class VonageStream:
    """One call's Vonage messages: :meth:`parse` what comes in (text events and binary
    audio), :meth:`media` (binary), :meth:`mark` and :meth:`clear` (text) what goes out."""

    provider = "vonage"

    def __init__(self) -> None:
        self.stream_id: str | None = None
        self._decoder: PcmDecoder | None = None
        self._encoder: PcmEncoder | None = None
        self.oversized = 0  # audio messages dropped unread for their length
        self._max_audio = 0

    def parse(self, message: str | bytes) -> StreamEvent | None:
        """One message from Vonage: its event, or None (``websocket:cleared``)."""
        if isinstance(message, bytes):
            return self._audio(message)
        body = load(message, self.provider)
        if is_opening(body):
            return self._connected(body)
        kind = event_name(body)
        if self._decoder is None:
            raise StreamProtocolError(f"{kind!r} before {CONNECTED}")
        if kind == "websocket:dtmf":
            return StreamDtmf(_digit(body))
        if kind == "websocket:notify":
            return StreamMarkPlayed(_mark_name(body))
        if kind == "websocket:cleared":
            return None
        raise StreamProtocolError(f"unknown event {kind!r}")

    def media(self, pcm: bytes, sample_rate: int) -> bytes:
        """Our audio (mono s16 at ``sample_rate``) as one binary message of whole 20 ms
        frames at the call's rate (one frame, given 20 ms)."""
        if self._encoder is None:
            raise StreamProtocolError(f"nothing can be sent before {CONNECTED}")
        return self._encoder.encode(pcm, sample_rate)

    def mark(self, name: str) -> str:
        """A ``notify``: Vonage sends it back once the audio before it has played."""
        return self._action("notify", payload={"name": name})

    def clear(self) -> str:
        """``clear``: Vonage drops what it has buffered (a barge-in)."""
        return self._action("clear")

    def _connected(self, body: dict[str, Any]) -> StreamStarted:
        if self._decoder is not None:
            raise StreamProtocolError(f"a second {CONNECTED}")
        content_type = body.get("content-type")
        match = _CONTENT_TYPE.fullmatch(content_type) if isinstance(content_type, str) else None
        if match is None:
            raise StreamProtocolError(
                f"unsupported content-type {content_type!r}: audio/l16;rate=8000|16000|24000"
            )
        rate = int(match.group(1))
        headers = {k: v for k, v in body.items() if k not in ("event", "content-type")}
        key = next((k for k in _CALL_KEYS if headers.get(k)), None)
        call_id = call_identifier(headers[key], key) if key is not None else ""
        self.stream_id = call_id or uuid.uuid4().hex
        self._decoder = PcmDecoder(rate)
        self._encoder = PcmEncoder(rate, rate // 50 * 2)  # 20 ms of s16
        self._max_audio = audio_bytes("pcm", rate, MAX_AUDIO_SECONDS)
        return StreamStarted(
            stream_id=self.stream_id,
            call_id=call_id,
            encoding="pcm",
            sample_rate=rate,
            parameters={k: v if isinstance(v, str) else json.dumps(v) for k, v in headers.items()},
        )

    def _audio(self, data: bytes) -> StreamAudio | None:
        if self._decoder is None:
            raise StreamProtocolError(f"audio before {CONNECTED}")
        if len(data) > MAX_MESSAGE:
            raise StreamProtocolError(f"message over {MAX_MESSAGE} bytes")
        if len(data) > self._max_audio:  # Vonage sends 20 ms: dropped before resampling
            self.oversized += 1
            return None
        return StreamAudio(self._decoder.decode(data))

    def _action(self, action: str, **body: Any) -> str:
        if self.stream_id is None:
            raise StreamProtocolError(f"nothing can be sent before {CONNECTED}")
        return json.dumps({"action": action, **body})


def _mark_name(body: dict[str, Any]) -> str:
    payload = body.get("payload")
    name = payload.get("name") if isinstance(payload, dict) else None
    if not isinstance(name, str):
        raise StreamProtocolError("'websocket:notify' without payload.name")
    return name


def _digit(body: dict[str, Any]) -> str:
    # The digit is at the top level; some streams nest it as dtmf.digit.
    nested = body.get("dtmf")
    return digit(nested.get("digit") if isinstance(nested, dict) else body.get("digit"))
