"""ElevenLabs' multi-context stream-input TTS
(``wss://api.elevenlabs.io/v1/text-to-speech/{voice_id}/multi-stream-input``) as a
:class:`~pipeline.services.socket_tts.SocketTTS`: one socket per call, one context per
answer.

The protocol, as the ``elevenlabs`` SDK 2.78 types it (``SendMessageMulti`` and
``ReceiveMessageMulti`` in ``elevenlabs.v_1_text_to_speech_voice_id_multi_stream_input``):
the key goes in the ``xi-api-key`` header, the session's settings in the query
(``model_id``, ``output_format``, ``language_code``, ``sync_alignment``,
``inactivity_timeout``, ``auto_mode``). A context opens with
``{"text": " ", "context_id": ...}`` (``InitializeConnectionMulti``; ``voice_settings``
only there), takes text as ``{"text": "... ", "context_id": ...}`` (``SendTextMulti``) and
``{"context_id": ..., "flush": true}`` (``FlushContext``) to speak what it holds now, and
ends with ``{"context_id": ..., "close_context": true}`` (``CloseContext``: what was
already flushed is still spoken). ``{"close_socket": true}`` ends the socket. The server
sends ``{"audio": <base64>, "alignment": ..., "normalizedAlignment": ..., "contextId":
...}`` (``AudioOutputMulti``) and ``{"isFinal": true, "contextId": ...}``
(``FinalOutputMulti``) once a closed context is over; an error is
``{"message": ..., "error": ..., "code": ...}``.

Why ``websockets`` and not the SDK: SDK 2.78 has no multi-context client at all, only
the message types. Its one WebSocket TTS, ``text_to_speech.convert_realtime``, is
synchronous (``websockets.sync``), speaks the single-context ``/stream-input``, owns its
socket for one ``with`` block over one text iterator (no reconnect, no cancel, no
context per answer, no bounded send queue), and always makes the scheme ``wss`` (a
``ws://`` test server or proxy cannot be used). :class:`SocketTTSConnection` must own the
socket for the whole call.

How a sentence's end is found: ElevenLabs sends no marker per flush (``isFinal`` comes
only once a context is closed), so the dialect derives :class:`Done`. It keeps, per
context, the non-space characters of each sentence sent, and counts the aligned
characters of each audio message (``sync_alignment=true`` puts the alignment on every
chunk); once the sentence's characters are all aligned, ``Done`` follows that message's
audio. Spaces are not counted: the vendor drops and adds them (a trailing space, a
leading one in ``normalizedAlignment``). The raw ``alignment`` is read, not
``normalizedAlignment``: its characters are the text sent (the count matches, and the
words are found in the :class:`SpokenText`), while the normalized one spells numbers and
romanizes non-Latin scripts; its known fault (chunks that restart from the first
character, pipecat #4316) shows with pronunciation dictionaries, which are not sent.

Word times: the SDK's ``Alignment`` says the times are "relative to the returned chunk
from the model, and not the full audio response", so each chunk's times get the
seconds of the context's audio received before it (measured from the audio, which is
what the caller hears, not from the alignment's durations, which can drift from it:
elevenlabs-docs #599).

Uncertain: a chunk whose alignment is missing (elevenlabs-python #689 reports some)
counts no characters, so a sentence whose last chunk has none ends only at the
``audio_timeout``; audio after a sentence's last character (a chunk aligned with spaces
only, or with none) is dropped while no later sentence is sent (the caller misses that
tail, if the vendor ever sends one), and would open the next sentence once it is;
whether an idle socket with no open context is closed by the vendor
(then it is reconnected at the next sentence; ``inactivity_timeout`` is set to its
180 s maximum and no keepalive is sent, as a keepalive must name an open context); the
``isFinal`` key's case (``FinalOutputMulti`` says ``isFinal``, the union type
``is_final``: both are read).
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

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

DEFAULT_BASE_URL = "wss://api.elevenlabs.io"
KEY_HINT = "Check ELEVENLABS_API_KEY."
DEFAULT_VOICE = "21m00Tcm4TlvDq8ikWAM"  # Rachel, a premade voice every account has
PCM_RATES = (8000, 16000, 22050, 24000, 44100, 48000)  # the pcm_<rate> output formats
INACTIVITY_TIMEOUT = 180  # seconds before the vendor closes an idle context: its maximum

Word = tuple[str, float, float]


def vendor_error(data: dict[str, Any]) -> ServiceError:
    """An error message as the user's error (ElevenLabs' text in ``detail`` only)."""
    said = [str(data[k]) for k in ("error", "code", "message") if data.get(k)]
    return bad_response(SERVICE, "it reported an error", detail=": ".join(said))


@dataclass
class _Context:
    """What the dialect knows of one context on this socket."""

    sentences: deque[int] = field(default_factory=deque)  # non-space chars still to align
    aligned: int = 0  # of the first of ``sentences``
    seconds: float = 0.0  # of the context's audio so far
    word: str = ""  # a word not yet ended by a space (it may go on in the next chunk)
    start: float = 0.0
    end: float = 0.0

    def take_word(self, words: list[Word]) -> None:
        if self.word:
            words.append((self.word, round(self.start, 3), round(self.end, 3)))
        self.word = ""


class ElevenLabsDialect:
    """The multi-stream-input wire protocol for one connection; :meth:`opening` resets
    it (a context is new on each socket)."""

    multiplexed = True
    keepalive_seconds: float | None = None  # see the module docstring

    def __init__(self, url: str, api_key: str, *, sample_rate: int = 24000,
                 voice_settings: dict[str, Any] | None = None) -> None:  # fmt: skip
        self.url = url
        self.headers = {"xi-api-key": api_key}
        self.sample_rate = sample_rate
        self.voice_settings = voice_settings
        self._contexts: dict[str, _Context] = {}

    def opening(self) -> list[Message]:
        self._contexts.clear()
        return []  # the settings are in the query

    def speak(self, context: str, text: str, first: bool) -> list[Message]:
        messages: list[Message] = []
        state = self._contexts.get(context)
        if first or state is None:
            state = self._contexts[context] = _Context()
            opening: dict[str, Any] = {"text": " ", "context_id": context}
            if self.voice_settings:
                opening["voice_settings"] = self.voice_settings
            messages.append(json.dumps(opening))
        spoken = " ".join(text.split())
        characters = sum(not c.isspace() for c in spoken)
        if characters:
            state.sentences.append(characters)
        # The text ends with a space (the SDK's rule), then the flush speaks it now.
        messages.append(json.dumps({"text": spoken + " ", "context_id": context}))
        messages.append(json.dumps({"context_id": context, "flush": True}))
        return messages

    def cancel(self, context: str) -> list[Message]:
        # Its flushed text is still spoken (CloseContext's docs): the base drops that audio.
        self._contexts.pop(context, None)
        return [json.dumps({"context_id": context, "close_context": True})]

    def end(self, context: str) -> list[Message]:
        self._contexts.pop(context, None)
        return [json.dumps({"context_id": context, "close_context": True})]

    def keepalive(self) -> Message | None:
        return None

    def closing(self) -> Message | None:
        return json.dumps({"close_socket": True})

    def read(self, message: Message) -> list[TTSSignal]:
        data = json_object(message)
        if data is None:
            return []
        raw = data.get("contextId") or data.get("context_id")
        context = str(raw) if raw else None
        if data.get("error") or (data.get("message") and not data.get("audio")):
            return [Failed(context, vendor_error(data))]
        state = self._contexts.get(context) if context else None
        signals: list[TTSSignal] = []
        pcm = pcm_from_base64(data.get("audio"))
        if pcm or data.get("alignment"):
            signals.extend(self._chunk(context, state, pcm, data.get("alignment")))
        if (data.get("isFinal") or data.get("is_final")) and context:
            self._contexts.pop(context, None)
            if state is not None and state.sentences:  # the vendor ended it: it is over
                words: list[Word] = []
                state.take_word(words)
                if words:
                    signals.append(Timestamps(context, tuple(words)))
                signals.append(Done(context))
        return signals

    def _chunk(self, context: str | None, state: _Context | None, pcm: bytes,
               alignment: object) -> list[TTSSignal]:  # fmt: skip
        """One audio message: its audio, then its words, then a Done per sentence whose
        characters are now all aligned."""
        if state is None or context is None:
            return [Audio(context, pcm)] if pcm else []  # a closed context's: the base drops it
        if not state.sentences:
            # A sentence's tail after its last character (its Done is out): not the next one's.
            return []
        signals: list[TTSSignal] = [Audio(context, pcm)] if pcm else []
        start = state.seconds
        state.seconds += len(pcm) / (2 * self.sample_rate)
        words: list[Word] = []
        done = _align(state, alignment if isinstance(alignment, dict) else {}, start, words)
        if words:
            signals.append(Timestamps(context, tuple(words)))
        signals.extend(Done(context) for _ in range(done))
        return signals


def _align(state: _Context, alignment: dict[str, Any], offset: float, words: list[Word]) -> int:
    """Counts one chunk's aligned characters against the context's sentences, adds its
    ended words (seconds from the context's start) to ``words``; the sentences ended."""
    chars = alignment.get("chars") or []
    starts = alignment.get("charStartTimesMs") or []
    durations = alignment.get("charDurationsMs") or []
    done = 0
    for i, char in enumerate(chars):
        char = str(char)
        start = offset + (float(starts[i]) / 1000 if i < len(starts) else 0.0)
        end = start + (float(durations[i]) / 1000 if i < len(durations) else 0.0)
        if not char.strip():
            state.take_word(words)
            continue
        if not state.word:
            state.start = start
        state.word += char
        state.end = end
        if not state.sentences:
            continue  # more than was sent: nothing to end
        state.aligned += sum(not c.isspace() for c in char)
        if state.aligned >= state.sentences[0]:
            state.take_word(words)  # the sentence's last word ends with it
            state.sentences.popleft()
            state.aligned = 0
            done += 1
    return done


class ElevenLabsTTS(SocketTTS):
    """``PARLEY_TTS=elevenlabs``: one multi-stream-input socket per call."""

    name = "elevenlabs"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        model: str = "eleven_flash_v2_5",
        voice: str = DEFAULT_VOICE,
        language: str | None = None,
        sample_rate: int = 24000,
        breaker: CircuitBreaker | None = None,
        connect_timeout: float = 5.0,
        audio_timeout: float = 5.0,
    ) -> None:
        if sample_rate not in PCM_RATES:
            raise ValueError(f"ElevenLabs speaks PCM at {PCM_RATES}, not {sample_rate} Hz")
        super().__init__(model=model, voice=voice, sample_rate=sample_rate, breaker=breaker,
                         connect_timeout=connect_timeout, audio_timeout=audio_timeout,
                         key_hint=KEY_HINT)  # fmt: skip
        self.api_key = api_key
        self.base_url = base_url
        self.language = language
        self.voice_settings: dict[str, Any] | None = None  # the voice's own when None
        path = f"/v1/text-to-speech/{quote(voice, safe='')}/multi-stream-input"
        self.url = socket_url(base_url, path, self.query())

    def query(self) -> dict[str, Any]:
        """The session's settings. ``auto_mode``: each sentence is sent whole and
        flushed, the case the vendor recommends it for (no chunk schedule, no buffers:
        the first audio comes sooner)."""
        query: dict[str, Any] = {
            "model_id": self.model,
            "output_format": f"pcm_{self.sample_rate}",
            "sync_alignment": "true",
            "inactivity_timeout": INACTIVITY_TIMEOUT,
            "auto_mode": "true",
        }
        if self.language:
            query["language_code"] = self.language
        return query

    def dialect(self) -> ElevenLabsDialect:
        return ElevenLabsDialect(self.url, self.api_key, sample_rate=self.sample_rate,
                                 voice_settings=self.voice_settings)  # fmt: skip
