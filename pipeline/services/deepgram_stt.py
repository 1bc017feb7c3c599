"""Deepgram's live streaming STT (``wss://api.deepgram.com/v1/listen``) as a
:class:`~pipeline.services.socket_stt.SocketSTT` (``PARLEY_STT=deepgram``).

The wire protocol is spoken here with ``websockets`` (through
:class:`~pipeline.services.vendor_socket.VendorSocket`). The SDK (deepgram-sdk 7) can be
pointed at another host (``DeepgramClientEnvironment(production=...)``), but its
``listen.v1.connect`` is a context manager that owns one socket for its block (on the
legacy ``websockets`` client), with no reconnect and no replay, while
:class:`~pipeline.services.socket_stt.SocketSTTStream` must own the socket (bounded
queue, reconnect, replay of the held audio).

The protocol (as deepgram-sdk 7.16 speaks it): the query carries the session's settings
(``model``, ``encoding=linear16``, ``sample_rate``, ``channels``, ``interim_results``...),
``Authorization: Token <key>``; audio goes as binary frames of any size; the client
sends ``KeepAlive``, ``Finalize`` and ``CloseStream`` as JSON; the server sends
``Results`` (``is_final`` false for interim words, true once a segment is settled;
``speech_final`` at Deepgram's endpoint; ``from_finalize`` on the answer to a
``Finalize``), ``UtteranceEnd``, ``SpeechStarted``, ``Metadata`` and ``Error``. Word
times are seconds on the connection; they are mapped to seconds of the stream (the
replay after a reconnect starts at the last confirmed finalize).

Uncertain, and so handled conservatively:

- Deepgram's docs say a ``Finalize`` answer (``from_finalize: true``) "typically occurs
  when there is a noticeable amount of audio buffered"; with little or none it may never
  come. The base only sends a finalize after new audio, and a missing answer ends at
  ``finalize_timeout`` (a :class:`~pipeline.services.errors.ServiceTimeoutError`).
- Only the ``Results`` that carries ``from_finalize`` answers a request; finals before
  it (Deepgram's own endpointing) are words of the same request.
- Deepgram closes a socket after about 10 s with neither audio nor a text message
  (NET-0001): a ``KeepAlive`` goes after 2.5-5 s of quiet.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import ServiceError, bad_response
from pipeline.services.live_stt import Word, Words
from pipeline.services.socket_stt import (
    SERVICE,
    Failed,
    Flushed,
    Signal,
    SocketSTT,
    json_object,
    socket_url,
)
from pipeline.services.vendor_socket import Message

DEFAULT_BASE_URL = "wss://api.deepgram.com"
KEY_HINT = "Check DEEPGRAM_API_KEY."
RATE = 16000
BYTES_PER_SECOND = RATE * 2
UTTERANCE_END_MS = 1000  # Deepgram's minimum; it needs interim_results


def vendor_error(data: dict[str, Any]) -> ServiceError:
    """An ``Error`` message as the user's error (Deepgram's text in ``detail`` only)."""
    said = [str(data[k]) for k in ("variant", "code", "description", "message") if data.get(k)]
    return bad_response(SERVICE, "it reported an error", detail=": ".join(said))


class DeepgramDialect:
    """The listen v1 wire protocol for one stream; :meth:`opening` resets it per
    connection."""

    def __init__(self, url: str, api_key: str, *, language: str | None = None,
                 keepalive_seconds: float | None = 5.0) -> None:  # fmt: skip
        self.url = url
        self.headers = {"Authorization": f"Token {api_key}"}
        self.keepalive_seconds = keepalive_seconds
        self.language = None if language == "multi" else language
        self._requests: deque[float] = deque()  # stream seconds at each outstanding request
        self._base = 0.0  # stream seconds before this connection's first byte
        self._confirmed = 0.0  # stream seconds up to the last answered request
        self._sent = 0  # bytes of audio on this connection

    def opening(self) -> list[Message]:
        self._requests.clear()
        self._base = self._confirmed  # the stream replays the audio after it
        self._sent = 0
        return []  # the settings are in the query

    def audio(self, pcm: bytes) -> Message | None:
        if not pcm:
            return None  # an empty frame would end the stream (Deepgram's legacy close)
        self._sent += len(pcm)
        return pcm

    def finalize(self) -> list[Message]:
        self._requests.append(self._base + self._sent / BYTES_PER_SECOND)
        return [json.dumps({"type": "Finalize"})]

    def keepalive(self) -> Message | None:
        return json.dumps({"type": "KeepAlive"})

    def closing(self) -> Message | None:
        return json.dumps({"type": "CloseStream"})

    def read(self, message: Message) -> list[Signal]:
        data = json_object(message)
        if data is None:
            return []
        kind = data.get("type")
        if kind == "Results":
            return self._results(data)
        if kind == "UtteranceEnd":
            return [Words("", final=True, end_of_speech=True, language=self.language)]
        if kind == "Error" or (kind is None and ("err_code" in data or "error" in data)):
            return [Failed(vendor_error(data))]
        return []  # Metadata, SpeechStarted, ConfigureSuccess...

    def _results(self, data: dict[str, Any]) -> list[Signal]:
        alternatives = (data.get("channel") or {}).get("alternatives") or [{}]
        best = alternatives[0] if isinstance(alternatives[0], dict) else {}
        text = str(best.get("transcript") or "")
        languages = best.get("languages") or ()
        language = str(languages[0]) if languages else self.language
        if not data.get("is_final"):
            return [Words(text, final=False, language=language)]
        words = tuple(self._word(w) for w in best.get("words") or () if isinstance(w, dict))
        ended = bool(data.get("speech_final"))
        signals: list[Signal] = [Words(text, True, words, end_of_speech=ended, language=language)]
        if data.get("from_finalize") and self._requests:
            self._confirmed = self._requests.popleft()
            signals.append(Flushed())
        return signals

    def _word(self, word: dict[str, Any]) -> Word:
        text = str(word.get("punctuated_word") or word.get("word") or "")
        start = round(self._base + float(word.get("start") or 0), 3)
        return Word(text, start, round(self._base + float(word.get("end") or 0), 3))


class DeepgramSTT(SocketSTT):
    """``PARLEY_STT=deepgram``: one listen v1 socket per call."""

    name = "deepgram"
    keepalive_seconds = 5.0  # Deepgram closes after ~10 s without audio or a message

    def __init__(
        self,
        api_key: str,
        *,
        model: str = "nova-3",
        language: str | None = None,
        base_url: str | None = None,
        endpointing_ms: int = 300,
        breaker: CircuitBreaker | None = None,
        connect_timeout: float = 5.0,
        finalize_timeout: float = 1.0,
    ) -> None:
        super().__init__(language=language, breaker=breaker, connect_timeout=connect_timeout,
                         finalize_timeout=finalize_timeout, key_hint=KEY_HINT)  # fmt: skip
        self.api_key = api_key
        self.model = model
        self.base_url = base_url
        self.endpointing_ms = endpointing_ms
        self.url = socket_url(base_url or DEFAULT_BASE_URL, "/v1/listen", self.query())

    def query(self) -> dict[str, Any]:
        """The session's settings, as the SDK encodes them (booleans as ``true``)."""
        query: dict[str, Any] = {
            "model": self.model,
            "encoding": "linear16",
            "sample_rate": RATE,
            "channels": 1,
            "interim_results": "true",
            "punctuate": "true",
            "endpointing": self.endpointing_ms,
            "vad_events": "true",
            "utterance_end_ms": UTTERANCE_END_MS,
        }
        if self.language:
            query["language"] = self.language
        return query

    def dialect(self) -> DeepgramDialect:
        return DeepgramDialect(self.url, self.api_key, language=self.language,
                               keepalive_seconds=self.keepalive_seconds)  # fmt: skip
