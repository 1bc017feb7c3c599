"""Deepgram Aura's live TTS (``wss://api.deepgram.com/v1/speak``) as a
:class:`~pipeline.services.socket_tts.SocketTTS`.

The protocol, as deepgram-sdk 7.16.0 speaks it (``deepgram/speak/v1/socket_client.py``
and its ``types``, checked one by one):

- the handshake carries the session's settings in the query (``model``, ``encoding``,
  ``sample_rate``; the SDK also knows ``speed`` and ``mip_opt_out``) and
  ``Authorization: Token <key>``; a refused key is HTTP 401 at the handshake;
- the client sends JSON text: ``{"type": "Speak", "text": ...}`` (``SpeakV1Text``),
  ``{"type": "Flush"}``, ``{"type": "Clear"}`` and ``{"type": "Close"}``
  (``SpeakV1Flush``/``Clear``/``Close``: ``type`` only). There is no ``KeepAlive`` for
  speak v1 (the SDK's control types are ``Flush``/``Clear``/``Close`` and nothing else);
- the server sends the audio as binary frames (raw PCM with ``encoding=linear16``, no
  container) and JSON: ``Metadata`` (``request_id``, ``model_name``, ``model_version``,
  ``model_uuid``), ``Flushed`` and ``Cleared`` (each with an integer ``sequence_id``),
  and ``Warning`` (``description``, ``code``). A fatal error is a close frame whose
  reason says why (Deepgram's reference); an ``Error`` JSON, as listen v1 sends, is
  read too in case one comes. The SDK's response union cannot tell ``Flushed`` from
  ``Cleared`` by class (same shape): only ``type`` does, which is what is read here.

Aura has no contexts, so the dialect is not multiplexed: the base speaks one sentence at
a time (``Speak`` then ``Flush``; ``Flushed`` ends its audio) and a barge-in sends
``Clear``, whose ``Cleared`` confirms that no more of that sentence's audio will come.

Why ``websockets`` (through :class:`~pipeline.services.vendor_socket.VendorSocket`)
instead of the SDK: ``client.speak.v1.connect`` is an async context manager that owns
one socket for its block (on the legacy ``websockets`` client): no reconnect, no way to
set the handshake timeout (the library's default applies), each ``send_*`` awaits the
socket itself (no bounded queue the caller can fill without waiting), and a refused
handshake becomes an ``ApiError`` with a fixed body (the status, not our key hint). The base must
own the socket for the whole call: connect ahead of the first answer, bounded send
queue, retry of a sentence on a new socket, one breaker count per failure.

Uncertain (the docs do not say, so it is handled conservatively):

- whether a ``Flush`` with nothing buffered is answered with ``Flushed``: the base only
  flushes after a sentence's text, and a missing answer ends at ``audio_timeout``;
- whether ``Clear`` is answered when nothing is being generated, and whether a
  ``Flushed`` for the cleared text can still come after ``Cleared``. The base counts a
  ``Clear`` as pending until its ``Cleared`` and drops everything before it; a
  ``Cleared`` that never came would leave later audio dropped on that socket;
- what ``sequence_id`` numbers (Deepgram's examples show 0): it is not used;
- Deepgram allows 20 ``Flush`` per 60 s, then answers a ``Warning`` and does not
  flush: that sentence ends at ``audio_timeout`` (the base then sends ``Clear``, so its
  text cannot leak into the next sentence). A ``Warning`` is only logged here;
- no idle timeout is documented for speak v1 and there is no keepalive message, so
  ``keepalive_seconds`` is None: a socket Deepgram closes while idle is reopened at the
  next sentence (one handshake of latency).
"""

from __future__ import annotations

import json
from typing import Any

from loguru import logger

from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import ServiceError, bad_response
from pipeline.services.socket_stt import json_object, socket_url
from pipeline.services.socket_tts import SERVICE, SocketTTS
from pipeline.services.tts_dialect import Audio, Done, Failed, TTSSignal
from pipeline.services.vendor_socket import Message

DEFAULT_BASE_URL = "wss://api.deepgram.com"
KEY_HINT = "Check DEEPGRAM_API_KEY."
DEFAULT_MODEL = "aura-2-thalia-en"
SAMPLE_RATES = (8000, 16000, 24000, 32000, 48000)  # the SDK's SpeakV1SampleRate

_FLUSH = json.dumps({"type": "Flush"})
_CLEAR = json.dumps({"type": "Clear"})
_CLOSE = json.dumps({"type": "Close"})


def speak_error(data: dict[str, Any]) -> ServiceError:
    """An ``Error`` message as the user's error (Deepgram's text in ``detail`` only).
    Like :func:`pipeline.services.deepgram_stt.vendor_error`, but for the TTS."""
    said = [str(data[k]) for k in ("variant", "code", "description", "message") if data.get(k)]
    return bad_response(SERVICE, "it reported an error", detail=": ".join(said))


def aura_model(model: str, voice: str) -> str:
    """The model to ask for: in Aura the voice is the model (``aura-2-thalia-en``), so a
    ``voice`` that is a model name (``aura-...``) replaces ``model``; any other voice
    is refused rather than silently ignored."""
    if not voice:
        return model
    if voice.startswith("aura-"):
        return voice
    raise ValueError(
        f"Deepgram Aura's voice is its model name (such as {DEFAULT_MODEL}), not {voice!r}"
    )


class DeepgramSpeakDialect:
    """The speak v1 wire protocol for one connection (it keeps no state)."""

    multiplexed = False  # one stream of audio per socket: no context ids
    keepalive_seconds: float | None = None  # speak v1 has no keepalive message

    def __init__(self, url: str, api_key: str) -> None:
        self.url = url
        self.headers = {"Authorization": f"Token {api_key}"}

    def opening(self) -> list[Message]:
        return []  # the settings are in the query

    def speak(self, context: str, text: str, first: bool) -> list[Message]:
        return [json.dumps({"type": "Speak", "text": text}), _FLUSH]

    def cancel(self, context: str) -> list[Message]:
        return [_CLEAR]

    def end(self, context: str) -> list[Message]:
        return []  # each sentence was flushed already; the socket stays for the next answer

    def keepalive(self) -> Message | None:
        return None

    def closing(self) -> Message | None:
        return _CLOSE

    def read(self, message: Message) -> list[TTSSignal]:
        if isinstance(message, bytes):
            return [Audio(None, message)] if message else []
        data = json_object(message)
        if data is None:
            return []
        kind = data.get("type")
        if kind == "Flushed":
            return [Done(None)]
        if kind == "Cleared":
            return [Done(None, cleared=True)]
        if kind == "Warning":
            logger.warning("deepgram tts: {} {}", data.get("code"), data.get("description"))
            return []
        if kind == "Error" or (kind is None and ("err_code" in data or "error" in data)):
            return [Failed(None, speak_error(data))]
        return []  # Metadata, and anything newer


class DeepgramTTS(SocketTTS):
    """Deepgram Aura over one speak v1 socket per call."""

    name = "deepgram"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        model: str = DEFAULT_MODEL,
        voice: str = "",
        sample_rate: int = 24000,
        breaker: CircuitBreaker | None = None,
        connect_timeout: float = 5.0,
        audio_timeout: float = 5.0,
    ) -> None:
        model = aura_model(model, voice)
        if sample_rate not in SAMPLE_RATES:
            raise ValueError(f"Deepgram Aura speaks linear16 at {SAMPLE_RATES} Hz only")
        super().__init__(model=model, voice=model, sample_rate=sample_rate, breaker=breaker,
                         connect_timeout=connect_timeout, audio_timeout=audio_timeout,
                         key_hint=KEY_HINT)  # fmt: skip
        self.api_key = api_key
        self.base_url = base_url
        query = {"model": model, "encoding": "linear16", "sample_rate": sample_rate}
        self.url = socket_url(base_url or DEFAULT_BASE_URL, "/v1/speak", query)

    def dialect(self) -> DeepgramSpeakDialect:
        return DeepgramSpeakDialect(self.url, self.api_key)
