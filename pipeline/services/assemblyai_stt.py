"""AssemblyAI's Universal-Streaming v3 (``wss://streaming.assemblyai.com/v3/ws``) as a
:class:`~pipeline.services.socket_stt.SocketSTT` (``PARLEY_STT=assemblyai``).

The wire protocol is spoken here with ``websockets`` (through
:class:`~pipeline.services.vendor_socket.VendorSocket`): the SDK's ``StreamingClient``
runs its socket in two threads with blocking ``recv``/``send``, and its asyncio client
owns the socket too, while :class:`~pipeline.services.socket_stt.SocketSTTStream` must own
it (bounded queue, reconnect, replay of the held audio).

The protocol (as assemblyai 1.8.2 speaks it): the query carries the session's settings,
``Authorization: <key>`` (the raw key, no ``Bearer``); the server sends ``Begin``, then
``Turn`` messages (``end_of_turn`` false while a turn grows, true once at its end; with
``format_turns`` the end comes twice, unformatted then formatted) and ``Termination``
after ``Terminate``. Audio goes as binary frames of 50-1000 ms (others close the socket
with 3007), so 20 ms frames are gathered into >= 50 ms, and a finalize pads its tail
with silence to 50 ms before ``ForceEndpoint``.

Choices:

- ``format_turns`` off: one end-of-turn ``Turn`` per turn, sooner (the LLM needs no
  casing); an end repeated for the same ``turn_order`` is dropped anyway.
- Flushed: ``ForceEndpoint`` ends the current turn with an end-of-turn ``Turn``; only an
  end that comes while a request is outstanding answers it (they are counted), any
  other is AssemblyAI's own endpoint (words with ``end_of_speech``, no ``Flushed``).
  AssemblyAI's endpointing is made lenient (``end_of_turn_confidence_threshold`` 1,
  ``max_turn_silence`` 10 s), since Parley's VAD decides the turns and each of its
  pauses sends ``ForceEndpoint`` anyway; so its own ends are rare.
- A ``ForceEndpoint`` with no turn in progress may get no answer (the docs only say it
  "ends the current turn"). A dialect cannot send a signal without a server message,
  so such a finalize ends at ``finalize_timeout``; the padded tail keeps that to
  requests with audio the server heard no words in.
- Keepalive: no ``inactivity_timeout`` is set (the session then does not idle out); a
  ``KeepAlive`` (the documented message for that timer) still goes every 5 s of quiet,
  cheaply guarding against the idle close (4031) between utterances.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import (
    ServiceAuthError,
    ServiceError,
    ServiceHTTPError,
    ServiceRateLimitError,
    service_name,
)
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

DEFAULT_BASE_URL = "wss://streaming.assemblyai.com"
ENGLISH = "universal-streaming-english"
MULTILINGUAL = "universal-streaming-multilingual"
KEY_HINT = "Check ASSEMBLYAI_API_KEY."
RATE = 16000
BYTES_PER_MS = RATE * 2 // 1000
MIN_FRAME = 50 * BYTES_PER_MS  # AssemblyAI takes 50-1000 ms per frame
MAX_FRAME = 1000 * BYTES_PER_MS
AUTH_CODES = {4001, 4002, 4003}
BUSY_CODES = {3009, 4029, 4102}


def vendor_error(code: int | None, text: str, key_hint: str = KEY_HINT) -> ServiceError:
    """An ``Error`` message as the user's error (AssemblyAI's text in ``detail`` only)."""
    name = service_name(SERVICE)
    detail = f"{code}: {text}" if code is not None else text
    if code in AUTH_CODES:
        return ServiceAuthError(SERVICE, f"{name} rejected the API key. {key_hint}", detail=detail)
    if code in BUSY_CODES:
        message = f"{name} is rate limiting requests; try again shortly."
        return ServiceRateLimitError(SERVICE, message, detail=detail)
    return ServiceHTTPError(SERVICE, f"{name} reported an error.", retryable=True, detail=detail)


class AssemblyAIDialect:
    """The v3 wire protocol for one stream; :meth:`opening` resets it per connection."""

    keepalive_seconds: float | None = 5.0

    def __init__(self, url: str, api_key: str, *, format_turns: bool = False) -> None:
        self.url = url
        self.headers = {"Authorization": api_key}
        self.format_turns = format_turns
        self._buffer = bytearray()
        self._requests: deque[float] = deque()  # stream seconds at each outstanding request
        self._ended = -1  # the last turn_order whose end was counted
        self._base = 0.0  # stream seconds before this connection's first byte
        self._confirmed = 0.0  # stream seconds up to the last answered request
        self._real_ms = 0.0  # this connection's audio, as Parley sent it
        self._pads: list[tuple[float, float]] = []  # (vendor ms after a pad, its ms)

    def opening(self) -> list[Message]:
        self._buffer.clear()
        self._requests.clear()
        self._ended = -1
        self._base = self._confirmed  # the stream replays the audio after it
        self._real_ms = 0.0
        self._pads = []
        return []

    def audio(self, pcm: bytes) -> Message | None:
        self._buffer += pcm
        if len(self._buffer) < MIN_FRAME:
            return None
        return self._take(min(len(self._buffer) - len(self._buffer) % 2, MAX_FRAME))

    def finalize(self) -> list[Message]:
        messages: list[Message] = []
        while len(self._buffer) > MAX_FRAME:
            messages.append(self._take(MAX_FRAME))
        if self._buffer:
            real = len(self._buffer)
            pad = max(0, MIN_FRAME - real)
            frame = self._take(real) + bytes(pad)
            if pad:
                self._pads.append((self._vendor_ms(), pad / BYTES_PER_MS))
            messages.append(frame)
        self._requests.append(self._base + self._real_ms / 1000)
        messages.append(json.dumps({"type": "ForceEndpoint"}))
        return messages

    def keepalive(self) -> Message | None:
        return json.dumps({"type": "KeepAlive"})

    def closing(self) -> Message | None:
        return json.dumps({"type": "Terminate"})

    def read(self, message: Message) -> list[Signal]:
        data = json_object(message)
        if data is None:
            return []
        kind = data.get("type")
        if kind == "Turn":
            return self._turn(data)
        if kind == "Error" or (kind is None and "error" in data):
            code = data.get("error_code")
            return [Failed(vendor_error(code if isinstance(code, int) else None,
                                        str(data.get("error", ""))))]  # fmt: skip
        return []  # Begin, Termination, SpeechStarted, Warning, Heartbeat...

    def _turn(self, data: dict[str, Any]) -> list[Signal]:
        text = str(data.get("transcript") or "")
        order = int(data.get("turn_order") or 0)
        ended = bool(data.get("end_of_turn"))
        if ended and self.format_turns and not data.get("turn_is_formatted"):
            ended = False  # the formatted end follows: count that one
        if not ended:
            return [Words(text, final=False)]
        if order <= self._ended:
            return []  # an end already counted (format_turns' second copy)
        self._ended = order
        words = tuple(self._word(w) for w in data.get("words") or () if w.get("word_is_final", 1))
        language = data.get("language_code") or None
        signals: list[Signal] = [Words(text, True, words, end_of_speech=True, language=language)]
        if self._requests:
            self._confirmed = self._requests.popleft()
            signals.append(Flushed())
        return signals

    def _word(self, word: dict[str, Any]) -> Word:
        return Word(str(word.get("text", "")), self._seconds(word.get("start", 0)),
                    self._seconds(word.get("end", 0)))  # fmt: skip

    def _seconds(self, vendor_ms: float) -> float:
        """A vendor time (ms on this connection, pads included) in stream seconds."""
        padded = sum(pad for after, pad in self._pads if after <= vendor_ms)
        return round(self._base + (float(vendor_ms) - padded) / 1000, 3)

    def _vendor_ms(self) -> float:
        return self._real_ms + sum(pad for _, pad in self._pads)

    def _take(self, size: int) -> bytes:
        frame = bytes(self._buffer[:size])
        del self._buffer[:size]
        self._real_ms += size / BYTES_PER_MS
        return frame


class AssemblyAISTT(SocketSTT):
    """``PARLEY_STT=assemblyai``: one v3 streaming socket per call."""

    name = "assemblyai"
    end_of_turn_confidence_threshold = 1.0  # lenient: Parley's VAD decides the turns
    max_turn_silence_ms = 10_000

    def __init__(
        self,
        api_key: str,
        *,
        model: str = ENGLISH,
        language: str | None = None,
        base_url: str | None = None,
        breaker: CircuitBreaker | None = None,
        connect_timeout: float = 5.0,
        finalize_timeout: float = 1.0,
    ) -> None:
        super().__init__(language=language, breaker=breaker, connect_timeout=connect_timeout,
                         finalize_timeout=finalize_timeout, key_hint=KEY_HINT)  # fmt: skip
        if language and not language.lower().startswith("en") and model == ENGLISH:
            model = MULTILINGUAL
        self.api_key = api_key
        self.model = model
        self.base_url = base_url
        self.url = socket_url(base_url or DEFAULT_BASE_URL, "/v3/ws", self.query())

    def query(self) -> dict[str, Any]:
        """The session's settings, as the SDK encodes them."""
        query: dict[str, Any] = {
            "sample_rate": RATE,
            "encoding": "pcm_s16le",
            "speech_model": self.model,
            "format_turns": "false",
            "end_of_turn_confidence_threshold": self.end_of_turn_confidence_threshold,
            "max_turn_silence": self.max_turn_silence_ms,
        }
        if self.model == MULTILINGUAL:
            query["language_detection"] = "true"
        return query

    def dialect(self) -> AssemblyAIDialect:
        return AssemblyAIDialect(self.url, self.api_key)
