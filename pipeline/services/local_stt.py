"""Speech-to-text on the embedded whisper tiny.en (faster-whisper, CTranslate2 int8).

Whisper is not a streaming model: it pads every input to 30 s and decodes once, so it
runs once per utterance, after the VAD's stop (see :mod:`pipeline.transcriber`).

How it decodes is a :class:`Decoding`. :data:`DEFAULT_DECODING` was tuned on the
generated evaluation set (``bench/stt_wer.py``: 60 sentences with numbers and names, in
espeak-ng and the embedded hibari voice); :data:`BASELINE_DECODING` is the decoding used
before, kept so the bench can compare. What the tuning found on tiny.en:

- Beam search (5) hears robotic speech better than greedy (espeak WER 14 % → 11 %) for
  a few per cent more time; the neural voice is near-exact either way. No conditioning
  on earlier text: one utterance has none.
- Tiny.en falls into loops on speech it is unsure of ("…like in Paris in Paris in
  Paris?" for "…in Paris in spring?"), with any beam. A short loop is too short for
  faster-whisper's compression-ratio check, and a permanent n-gram ban would forbid
  real repeats ("in the … in the"). So a transcript with a repeated phrase is decoded
  again with repeated word pairs banned, and any loop still left is cut to one copy.
- No temperature fallback: on this set it changed no transcript, while it made the
  slow cases slower (up to six more decodes) and the text random.
- No trimming by default. The transcriber's cut can carry the VAD's whole stop window
  (when its clock drifted), and trailing silence is where whisper is said to invent
  words, so :func:`trim_trailing` (last sound plus a margin) was tried: with 0.15, 1 and
  3 s of room noise after the speech it changed no WER beyond noise (57 vs 58 errors,
  9 vs 11), so it stays an option (``trim_margin_secs``). Trimming the start as well
  cost words (tiny.en misses soft first consonants without the pre-roll).
- ``max_new_tokens`` is bounded by the utterance's length, so a runaway loop cannot cost
  seconds of decoding.

faster-whisper's own no-speech rule still applies, so silence or noise gives an empty
transcript.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.audio_level import amplitude, block_mean_squares
from pipeline.resampling import resample
from pipeline.services.embedded import EmbeddedModels
from pipeline.services.stt import Transcript

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

SAMPLE_RATE = 16000
_INT16_SCALE = np.float32(1.0 / 32768.0)
_MAX_NEW_TOKENS = 440  # whisper's 448 minus the prompt (4 tokens without timestamps)
_FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # faster-whisper's default


@dataclass(frozen=True, slots=True)
class Decoding:
    """How one utterance is decoded (faster-whisper options plus our own guards).

    ``temperatures``: the first is the decoding; later ones are the fallback, tried when a
    result's compression ratio or mean log-probability is past its threshold.
    ``repeat_ngram_retry``: when the transcript repeats a phrase, decode again with
    n-grams of this size banned (0: no retry); ``collapse_repeats`` then cuts any loop
    still there to one copy. ``trim_margin_secs``: keep this much after the last sound
    (None: no trimming). ``tokens_per_second``: cap on the tokens decoded per second of
    audio, plus ``min_tokens`` (None: whisper's own limit of 448).
    """

    name: str
    beam_size: int = 1
    temperatures: tuple[float, ...] = _FALLBACK_TEMPERATURES
    compression_ratio_threshold: float | None = 2.4
    log_prob_threshold: float | None = -1.0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    repeat_ngram_retry: int = 0
    collapse_repeats: bool = False
    trim_margin_secs: float | None = None
    tokens_per_second: float | None = None
    min_tokens: int = 32
    extra: dict[str, Any] = field(default_factory=dict)

    def options(self, seconds: float, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for ``WhisperModel.transcribe`` on ``seconds`` of audio."""
        options: dict[str, Any] = {
            "language": "en",
            "beam_size": self.beam_size,
            "temperature": list(self.temperatures),
            "compression_ratio_threshold": self.compression_ratio_threshold,
            "log_prob_threshold": self.log_prob_threshold,
            "repetition_penalty": self.repetition_penalty,
            "no_repeat_ngram_size": self.no_repeat_ngram_size,
            "vad_filter": False,  # our VAD already cut the utterance
            "condition_on_previous_text": False,  # one utterance: no earlier text
            "without_timestamps": True,
        }
        if self.tokens_per_second is not None:
            # Per 30 s window, and whisper's context (448) also holds the prompt tokens.
            per_window = min(seconds, 30.0)
            wanted = self.min_tokens + round(self.tokens_per_second * per_window)
            options["max_new_tokens"] = min(_MAX_NEW_TOKENS, wanted)
        return {**options, **self.extra, **overrides}


BASELINE_DECODING = Decoding("baseline")
DEFAULT_DECODING = Decoding(
    "tuned",
    beam_size=5,
    temperatures=(0.0,),
    repeat_ngram_retry=2,
    collapse_repeats=True,
    tokens_per_second=8.0,
)
DECODINGS = {d.name: d for d in (BASELINE_DECODING, DEFAULT_DECODING)}


def to_whisper_input(pcm: np.ndarray, sample_rate: int) -> np.ndarray:
    """float32 mono 16 kHz in -1..1, from int16 or float samples at any rate."""
    samples = pcm.astype(np.float32) * _INT16_SCALE if pcm.dtype == np.int16 else pcm
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    # The transport already delivers 16 kHz: this only covers other callers.
    return resample(samples, sample_rate, SAMPLE_RATE)


_FRAME = 160  # 10 ms
# A frame is sound when it is within this much of the loudest frame and above the floor:
# relative, because users' levels differ by 30 dB; floored, so a silent clip stays silent.
_SOUND_BELOW_PEAK_DB = 40.0
_SOUND_FLOOR = amplitude(-55.0)  # RMS


def trim_trailing(audio: np.ndarray, margin_secs: float) -> np.ndarray:
    """``audio`` (float32, 16 kHz) up to its last frame of sound plus ``margin_secs``;
    unchanged when nothing in it is sound. The start is left alone: it is the VAD's
    onset minus the transcriber's pre-roll."""
    frames = audio.size // _FRAME
    if frames == 0:
        return audio
    rms = np.sqrt(block_mean_squares(audio, _FRAME))
    threshold = max(_SOUND_FLOOR, float(rms.max()) * amplitude(-_SOUND_BELOW_PEAK_DB))
    loud = np.flatnonzero(rms > threshold)
    if loud.size == 0:
        return audio
    end = (int(loud[-1]) + 1) * _FRAME + round(margin_secs * SAMPLE_RATE)
    return audio[: min(audio.size, end)]


_WORD = re.compile(r"\S+")


def _key(word: str) -> str:
    return re.sub(r"[^\w]", "", word.lower())


def find_repeat(text: str) -> tuple[int, int, int] | None:
    """The first loop in ``text``: a phrase of two or more words said twice or more in a
    row, or one word four times or more ("no no no" is something people say). Returns
    (first word, phrase length, copies) counted in words, or None. Case and punctuation
    do not count ("in Paris, in Paris")."""
    words = [_key(w) for w in _WORD.findall(text)]
    for start in range(len(words)):
        for size in range(1, (len(words) - start) // 2 + 1):
            phrase = words[start : start + size]
            if not all(phrase):
                continue
            copies = 1
            while words[start + copies * size : start + (copies + 1) * size] == phrase:
                copies += 1
            if copies >= (4 if size == 1 else 2):
                return start, size, copies
    return None


def collapse_repeats(text: str) -> str:
    """``text`` with every loop (see :func:`find_repeat`) cut to one copy."""
    while (found := find_repeat(text)) is not None:
        start, size, copies = found
        spans = [m.span() for m in _WORD.finditer(text)]
        # Keep the last copy (it carries the sentence's own punctuation), drop the others.
        cut_from = spans[start][0]
        cut_to = spans[start + (copies - 1) * size][0]
        text = text[:cut_from] + text[cut_to:]
    return text


class LocalSTT:
    """:class:`~pipeline.services.stt.STTService` on the shared embedded whisper model.

    Each :class:`Transcript` carries its own ``processing``: the seconds the
    transcription took in its worker (not counting time queued behind other calls).
    """

    model = "whisper-tiny.en"

    def __init__(
        self, models: EmbeddedModels | None = None, decoding: Decoding = DEFAULT_DECODING
    ) -> None:
        self._models = models or EmbeddedModels.shared()
        self.decoding = decoding

    async def transcribe(self, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> Transcript:
        whisper = await self._models.stt.get()
        text, seconds = await self._models.stt.pool.run(
            transcribe_utterance, whisper, pcm, sample_rate, self.decoding
        )
        return Transcript(text, "en", seconds)


def transcribe_utterance(
    whisper: WhisperModel, pcm: np.ndarray, sample_rate: int, decoding: Decoding
) -> tuple[str, float]:
    """(text, seconds it took) for one utterance; blocking, run it in a worker."""
    started = time.perf_counter()
    audio = to_whisper_input(pcm, sample_rate)
    if decoding.trim_margin_secs is not None:
        audio = trim_trailing(audio, decoding.trim_margin_secs)
    if audio.size == 0:
        return "", 0.0
    seconds = audio.size / SAMPLE_RATE
    text = _decode(whisper, audio, decoding.options(seconds))
    if decoding.repeat_ngram_retry and find_repeat(text) is not None:
        retry = _decode(
            whisper,
            audio,
            decoding.options(seconds, no_repeat_ngram_size=decoding.repeat_ngram_retry),
        )
        if retry and find_repeat(retry) is None:
            text = retry
    if decoding.collapse_repeats:
        text = collapse_repeats(text)
    return text, time.perf_counter() - started


def _decode(whisper: WhisperModel, audio: np.ndarray, options: dict[str, Any]) -> str:
    segments, _ = whisper.transcribe(audio, **options)
    # The segments are a generator: decoding happens here, in the worker.
    return "".join(segment.text for segment in segments).strip()


def with_name(decoding: Decoding, name: str, **changes: Any) -> Decoding:
    """A variant of ``decoding`` (for the bench's comparisons)."""
    return replace(decoding, name=name, **changes)
