"""OpenAI's realtime transcription session (``wss://api.openai.com/v1/realtime
?intent=transcription``, streaming ``gpt-4o-transcribe``) as a
:class:`~pipeline.services.socket_stt.SocketSTT` (``PARLEY_STT=openai-realtime``).

The wire protocol is spoken here with ``websockets`` (through
:class:`~pipeline.services.vendor_socket.VendorSocket`). The ``openai`` SDK's
``client.realtime.connect(extra_query={"intent": "transcription"})`` speaks the same
protocol, but its connection owns the socket (its own send queue, its own reconnect
that replays nothing), while :class:`~pipeline.services.socket_stt.SocketSTTStream` must
own it (bounded queue, reconnect, replay of the held audio with each finalize in its
place).

The protocol, in the GA shape the installed SDK (openai 3.54) speaks: no ``OpenAI-Beta``
header, ``Authorization: Bearer <key>``; the server opens with ``session.created``. The
client sends ``session.update`` with ``session.type: "transcription"`` and
``session.audio.input`` = ``format`` (``audio/pcm`` at 24 kHz: the only PCM rate),
``transcription`` (``model``, ``language`` as ISO-639-1) and ``turn_detection: null``
(Parley's VAD decides the turns: the server must not commit by itself). Audio goes as
``input_audio_buffer.append`` (base64 pcm16 at 24 kHz: Parley's 16 kHz is upsampled by
3/2 per connection, a cheap polyphase filter that keeps chunk seams); a finalize is
``input_audio_buffer.commit``. The server answers a commit with
``input_audio_buffer.committed`` (``item_id``), then
``conversation.item.input_audio_transcription.delta``\\ s (interim text, appended) and
one ``...completed`` (the item's ``transcript``) or ``...failed``. A commit of a buffer
that is empty or too short gets an ``error`` with code ``input_audio_buffer_commit_empty``
instead of ``committed``.

Choices, and what is uncertain:

- Completions may come out of commit order (the docs say transcription "runs
  asynchronously"); commits are matched to ``committed`` events in order (the server
  handles client events in order), then to completions by ``item_id``, and answered
  (final words, then :class:`~pipeline.services.socket_stt.Flushed`) in commit order.
- A commit needs some audio (the API's message says "at least 100ms"): a finalize pads a
  shorter tail with silence to ``MIN_COMMIT_MS``; a commit the server still calls empty
  is answered with no words (``Flushed``), not a failure. Whether such a rejected
  buffer is kept for the next commit is not documented.
- ``committed`` events carry no client ``event_id``: one the server made by itself
  (should ``turn_detection: null`` not hold) would take a request's place.
- Word times: none are given, so ``Words.words`` stays empty.
- Keepalive: none is known to be needed (``websockets`` pings every 20 s anyway);
  ``keepalive_seconds``, if set, sends an empty ``session.update``, which changes nothing.
  A session's maximum length (documented as 60 min for realtime sessions) ends the
  socket; the base then reconnects.
- Noise reduction is left out of the update (off unless asked for).
"""

from __future__ import annotations

import base64
import json
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.audio.resampling import Interpolator
from pipeline.services.circuit import CircuitBreaker
from pipeline.services.errors import ServiceError, bad_response
from pipeline.services.live_stt import Words
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

DEFAULT_BASE_URL = "wss://api.openai.com"
PATH = "/v1/realtime"
KEY_HINT = "Check PARLEY_OPENAI_API_KEY."
RATE = 24000  # the API's only PCM rate
BYTES_PER_MS = RATE * 2 // 1000
MIN_COMMIT_MS = 100  # the API's "buffer too small. Expected at least 100ms of audio"
COMMIT_EMPTY = "input_audio_buffer_commit_empty"
TRANSCRIPTION = "conversation.item.input_audio_transcription"


def vendor_error(error: dict[str, Any], what: str = "it reported an error") -> ServiceError:
    """An ``error`` (or a failed transcription) as the user's error; OpenAI's text goes
    to ``detail`` only."""
    said = [str(error[k]) for k in ("type", "code", "message", "param") if error.get(k)]
    return bad_response(SERVICE, what, detail=": ".join(said))


def iso_language(language: str | None) -> str | None:
    """Parley's language (``en-US``) as the ISO-639-1 code the API takes (``en``)."""
    if not language or language == "multi":
        return None
    return language.split("-")[0].split("_")[0].lower() or None


def _error_of(data: dict[str, Any]) -> dict[str, Any]:
    error = data.get("error")
    return error if isinstance(error, dict) else {}


class Upsampler:
    """16 kHz s16le chunks → 24 kHz s16le, seamless across chunks: x3 through the
    polyphase :class:`~pipeline.audio.resampling.Interpolator` (its low-pass is below
    8 kHz), then every second sample. Exactly 1.5 samples out per sample in."""

    def __init__(self) -> None:
        self._up = Interpolator(3)
        self._phase = 0  # where, in the next x3 chunk, the next kept sample falls
        self._odd = b""  # a byte of a sample split between two chunks

    def __call__(self, pcm: bytes) -> bytes:
        data = self._odd + pcm if self._odd else pcm
        cut = len(data) - len(data) % 2
        self._odd = data[cut:]
        samples = np.frombuffer(data, "<i2", count=cut // 2)
        if not samples.size:
            return b""
        up = self._up(samples)
        out = up[self._phase :: 2]
        self._phase = (self._phase - up.size) % 2
        return np.clip(np.rint(out), -32768, 32767).astype("<i2").tobytes()


@dataclass(slots=True)
class _Commit:
    """One commit sent on this connection, until it is answered."""

    event_id: str
    item_id: str | None = None  # from its ``committed``
    text: str | None = None  # its transcript, once complete ("" for none)
    language: str | None = None  # the language detected in it, if the model says


class OpenAIRealtimeDialect:
    """The transcription session's wire protocol for one stream; :meth:`opening` resets
    it per connection."""

    def __init__(self, url: str, api_key: str, *, model: str, language: str | None = None,
                 keepalive_seconds: float | None = None) -> None:  # fmt: skip
        self.url = url
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.keepalive_seconds = keepalive_seconds
        self.model = model
        self.language = iso_language(language)
        self._upsample = Upsampler()
        self._uncommitted = 0  # 24 kHz bytes appended since the last commit
        self._commits: deque[_Commit] = deque()
        self._interim: dict[str, str] = {}  # item_id → its deltas so far
        self._count = 0  # commits made by this stream (their event ids)

    def session(self) -> dict[str, Any]:
        """The ``session`` of the ``session.update``."""
        transcription: dict[str, Any] = {"model": self.model}
        if self.language:
            transcription["language"] = self.language
        audio_input = {"format": {"type": "audio/pcm", "rate": RATE},
                       "transcription": transcription, "turn_detection": None}  # fmt: skip
        return {"type": "transcription", "audio": {"input": audio_input}}

    def opening(self) -> list[Message]:
        self._upsample = Upsampler()  # the replay starts a fresh stream of samples
        self._uncommitted = 0
        self._commits.clear()
        self._interim.clear()
        return [json.dumps({"type": "session.update", "session": self.session()})]

    def audio(self, pcm: bytes) -> Message | None:
        return self._append(self._upsample(pcm))

    def finalize(self) -> list[Message]:
        messages: list[Message] = []
        short = MIN_COMMIT_MS * BYTES_PER_MS - self._uncommitted
        if 0 < self._uncommitted and short > 0:  # pad, or the API calls the buffer empty
            padding = self._append(bytes(short))
            if padding is not None:
                messages.append(padding)
        self._count += 1
        commit = _Commit(f"parley_commit_{self._count}")
        self._commits.append(commit)
        self._uncommitted = 0
        messages.append(json.dumps({"type": "input_audio_buffer.commit",
                                    "event_id": commit.event_id}))  # fmt: skip
        return messages

    def keepalive(self) -> Message | None:
        # No keepalive is documented; an update with no fields changes nothing.
        return json.dumps({"type": "session.update", "session": {"type": "transcription"}})

    def closing(self) -> Message | None:
        return None  # no goodbye message: closing the socket ends the session

    def read(self, message: Message) -> list[Signal]:
        data = json_object(message)
        if data is None:
            return []
        kind = data.get("type")
        if kind == "input_audio_buffer.committed":
            self._committed(str(data.get("item_id") or ""))
            return []
        if kind == f"{TRANSCRIPTION}.delta":
            item = str(data.get("item_id") or "")
            text = self._interim.get(item, "") + str(data.get("delta") or "")
            self._interim[item] = text
            return [Words(text.strip(), final=False)]
        if kind == f"{TRANSCRIPTION}.completed":
            return self._completed(data)
        if kind == f"{TRANSCRIPTION}.failed":
            what = "it could not transcribe the audio"
            return [Failed(vendor_error(_error_of(data), what))]
        if kind == "error":
            return self._error(_error_of(data))
        return []  # session.created/updated, conversation.item.added/done...

    def _committed(self, item_id: str) -> None:
        for commit in self._commits:
            if commit.item_id is None and commit.text is None:
                commit.item_id = item_id
                return
        # A commit we did not ask for (server VAD): its words join the next request.

    def _completed(self, data: dict[str, Any]) -> list[Signal]:
        item_id, transcript = str(data.get("item_id") or ""), str(data.get("transcript") or "")
        self._interim.pop(item_id, None)
        # Only some models (gpt-transcribe) name the languages they heard.
        languages = data.get("languages") or [{}]
        detected = languages[0].get("code") if isinstance(languages[0], dict) else None
        language = str(detected) if detected else None
        for commit in self._commits:
            if commit.item_id == item_id and commit.text is None:
                commit.text, commit.language = transcript, language
                return self._answered()
        return [Words(transcript.strip(), final=True, language=language)]

    def _error(self, error: dict[str, Any]) -> list[Signal]:
        if error.get("code") != COMMIT_EMPTY:
            return [Failed(vendor_error(error))]
        pending = [c for c in self._commits if c.item_id is None and c.text is None]
        match = [c for c in pending if c.event_id == error.get("event_id")] or pending[:1]
        if match:
            match[0].text = ""  # nothing to transcribe: answered, with no words
        return self._answered()

    def _answered(self) -> list[Signal]:
        """The commits at the head that are complete, in commit order."""
        signals: list[Signal] = []
        while self._commits and self._commits[0].text is not None:
            commit = self._commits.popleft()
            text = (commit.text or "").strip()
            if text:
                signals.append(Words(text, final=True, language=commit.language))
            signals.append(Flushed())
        return signals

    def _append(self, pcm: bytes) -> Message | None:
        if not pcm:
            return None
        self._uncommitted += len(pcm)
        audio = base64.b64encode(pcm).decode("ascii")
        return json.dumps({"type": "input_audio_buffer.append", "audio": audio})


class OpenAIRealtimeSTT(SocketSTT):
    """``PARLEY_STT=openai-realtime``: one realtime transcription session per call."""

    name = "openai-realtime"

    def __init__(
        self,
        api_key: str,
        *,
        model: str = "gpt-4o-transcribe",
        language: str | None = None,
        base_url: str = DEFAULT_BASE_URL,
        breaker: CircuitBreaker | None = None,
        connect_timeout: float = 5.0,
        finalize_timeout: float = 2.0,
        keepalive_seconds: float | None = None,
    ) -> None:
        super().__init__(language=language, breaker=breaker, connect_timeout=connect_timeout,
                         finalize_timeout=finalize_timeout, key_hint=KEY_HINT)  # fmt: skip
        self.api_key = api_key
        self.model = model
        self.base_url = base_url
        self.keepalive_seconds = keepalive_seconds
        self.url = socket_url(base_url or DEFAULT_BASE_URL, PATH, {"intent": "transcription"})

    def dialect(self) -> OpenAIRealtimeDialect:
        return OpenAIRealtimeDialect(self.url, self.api_key, model=self.model,
                                     language=self.language,
                                     keepalive_seconds=self.keepalive_seconds)  # fmt: skip
