"""Cartesia's TTS WebSocket (``wss://api.cartesia.ai/tts/websocket``) as a
:class:`~pipeline.services.socket_tts.SocketTTS` (``PARLEY_TTS=cartesia``).

The wire protocol is spoken here with ``websockets`` (through
:class:`~pipeline.services.vendor_socket.VendorSocket`). The SDK (cartesia 4.2) takes a
``websocket_base_url``, but its ``tts.websocket_connect()`` owns one socket for a
``with`` block, with no reconnect, and routes every context's events through queues
without a bound; :class:`~pipeline.services.socket_tts.SocketTTSConnection` must own the
socket (bounded queue, reconnect, a sentence sent again on a new socket).

The protocol (as cartesia 4.2 speaks it, ``Cartesia-Version: 2026-08-14``,
``Authorization: Bearer <key>``): each sentence is a generation request for the
answer's ``context_id`` (``model_id``, ``voice``, ``output_format`` raw ``pcm_s16le``,
``language``, ``add_timestamps``, ``continue: true``: more text follows in the same
context, so the voice keeps its prosody), then an empty ``transcript`` with
``flush: true``; the server sends ``chunk`` (base64 audio), ``timestamps``
(``word_timestamps``: ``words``, ``start``, ``end`` in seconds), ``flush_done`` once the
flushed text's audio is all out, ``done`` when a context ends (an empty transcript with
``continue: false``) and ``error``. ``{"context_id": ..., "cancel": true}`` stops a
context at once (a barge-in).

Uncertain, and so handled conservatively: Cartesia's docs do not say whether word times
restart at each flush. The base takes them as seconds from the context's start, unless
a sentence's first word comes before that sentence's own start: then they count from
the sentence (:meth:`~pipeline.services.socket_tts._Sentence.timed`).
"""

from __future__ import annotations

import json
from typing import Any

from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import ServiceError, bad_response
from pipeline.services.socket_stt import json_object, socket_url
from pipeline.services.socket_tts import SERVICE, SocketTTS
from pipeline.services.tts_dialect import (
    Audio,
    Done,
    Failed,
    Timestamps,
    TTSSignal,
    pcm_from_base64,
)
from pipeline.services.vendor_socket import Message

DEFAULT_BASE_URL = "wss://api.cartesia.ai"
KEY_HINT = "Check CARTESIA_API_KEY."
API_VERSION = "2026-08-14"  # what cartesia 4.2 sends
DEFAULT_MODEL = "sonic-3"
DEFAULT_VOICE = "f786b574-daa5-4673-aa0c-cbe3e8534c02"  # Cartesia's quickstart voice


def vendor_error(data: dict[str, Any]) -> ServiceError:
    """An ``error`` message as the user's error (Cartesia's text in ``detail`` only)."""
    said = [str(data[k]) for k in ("title", "error_code", "message", "error") if data.get(k)]
    return bad_response(SERVICE, "it reported an error", detail=": ".join(said))


class CartesiaDialect:
    """The TTS WebSocket's messages for one connection."""

    multiplexed = True
    keepalive_seconds: float | None = None  # a socket closed while idle is reopened

    def __init__(self, url: str, api_key: str, *, model: str, voice: str,
                 sample_rate: int, language: str | None) -> None:  # fmt: skip
        self.url = url
        self.headers = {"Authorization": f"Bearer {api_key}", "Cartesia-Version": API_VERSION}
        self._request: dict[str, Any] = {
            "model_id": model,
            "voice": {"mode": "id", "id": voice},
            "output_format": {
                "container": "raw",
                "encoding": "pcm_s16le",
                "sample_rate": sample_rate,
            },
            "add_timestamps": True,
        }
        if language:
            self._request["language"] = language.split("-")[0]

    def opening(self) -> list[Message]:
        return []

    def _generation(self, context: str, transcript: str, **extra: Any) -> str:
        return json.dumps({**self._request, "context_id": context, "transcript": transcript,
                           **extra})  # fmt: skip

    def speak(self, context: str, text: str, first: bool) -> list[Message]:
        # A continued context joins its sentences; the space keeps the words apart.
        transcript = text if first else " " + text
        return [
            self._generation(context, transcript, **{"continue": True}),
            self._generation(context, "", **{"continue": True, "flush": True}),
        ]

    def cancel(self, context: str) -> list[Message]:
        return [json.dumps({"context_id": context, "cancel": True})]

    def end(self, context: str) -> list[Message]:
        return [self._generation(context, "", **{"continue": False})]

    def keepalive(self) -> Message | None:
        return None

    def closing(self) -> Message | None:
        return None

    def read(self, message: Message) -> list[TTSSignal]:
        data = json_object(message)
        if data is None:
            return []
        context = data.get("context_id")
        context = context if isinstance(context, str) else None
        kind = data.get("type")
        if kind == "chunk":
            return [Audio(context, pcm_from_base64(data.get("data")))]
        if kind == "timestamps":
            return [Timestamps(context, _words(data.get("word_timestamps")))]
        if kind == "flush_done":
            return [Done(context)]
        if kind == "error":
            return [Failed(context, vendor_error(data))]
        return []  # done, phoneme_timestamps


def _words(data: object) -> tuple[tuple[str, float, float], ...]:
    if not isinstance(data, dict):
        return ()
    words, starts, ends = data.get("words"), data.get("start"), data.get("end")
    if not (isinstance(words, list) and isinstance(starts, list) and isinstance(ends, list)):
        return ()
    return tuple(
        (str(word), float(start), float(end))
        for word, start, end in zip(words, starts, ends, strict=False)
        if isinstance(start, int | float) and isinstance(end, int | float)
    )


class CartesiaTTS(SocketTTS):
    """Cartesia Sonic over one WebSocket per call; ``base_url``'s scheme and host only
    are used (``PARLEY_CARTESIA_URL``)."""

    name = "cartesia"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        model: str = DEFAULT_MODEL,
        voice: str = DEFAULT_VOICE,
        language: str | None = None,
        sample_rate: int = 24000,
        breaker: CircuitBreaker | None = None,
        connect_timeout: float = 5.0,
        audio_timeout: float = 5.0,
    ) -> None:
        super().__init__(model=model, voice=voice, sample_rate=sample_rate, breaker=breaker,
                         connect_timeout=connect_timeout, audio_timeout=audio_timeout,
                         key_hint=KEY_HINT)  # fmt: skip
        self.api_key = api_key
        self.base_url = base_url
        self.language = language

    def dialect(self) -> CartesiaDialect:
        return CartesiaDialect(
            socket_url(self.base_url, "/tts/websocket", {"cartesia_version": API_VERSION}),
            self.api_key,
            model=self.model,
            voice=self.voice,
            sample_rate=self.sample_rate,
            language=self.language,
        )
