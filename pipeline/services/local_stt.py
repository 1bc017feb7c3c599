"""Speech-to-text on the embedded whisper (faster-whisper's model, CTranslate2 int8).

Whisper is not a streaming model: it reads a window of audio and decodes once. Each
utterance is decoded after the VAD's stop (see :mod:`pipeline.hearing.transcriber`) by
:class:`~pipeline.services.whisper_decoder.WhisperDecoder` over a window of the
utterance's length plus a margin, at least 12 s (:data:`DEFAULT_DECODING`), rather than
faster-whisper's ``transcribe``, which pads every input to 30 s: the encoder's cost grows
with the window, and whisper base over 30 s took 1.0-1.3 s per utterance on two cores,
more than the whole answer may take. Measured on ``bench/stt_wer.py`` (30 sentences with
numbers and names; espeak / hibari / espeak at 10 dB SNR): whisper base over the short
window 6.7 / 1.5 / 11.5 % WER in 0.31 s, over 30 s 4.8 / 1.1 / 11.1 % in 1.0-1.3 s, and
whisper tiny.en over 30 s 9.6 / 0.7 / 17.0 % in 0.52 s: base with the short window hears
better than tiny.en did, in 60 % of its time. :data:`TUNED_30S_DECODING` stays for the
bench. How it decodes, and the guards, are in :mod:`pipeline.services.whisper_decoding`.

:class:`LocalSTT` is also a :class:`~pipeline.services.stt.StreamingSTTService` (off by
default, ``PARLEY_STT_STREAMING``): while the user speaks, the transcriber runs interim
passes over the recording so far through a :class:`LocalSTTStream`, which commits the
words two passes agree on (:mod:`pipeline.services.local_agreement`); the final pass
then forces them as the decoder's prefix and generates only the rest. Interim passes run
only when the shared STT pool has an idle worker and nothing queued, so they never queue
in front of a final pass (one already running cannot be stopped: it delays a final by at
most one pass). Measured (``bench/stt_latency.py``, whisper base, 8 sentences played in
real time): the STT time after the stop was 0.51 / 0.68 s p50 (espeak / hibari) against
0.39 / 0.43 s for one pass at the stop, at 3.6x the CPU, and the WER rose (11.1 vs 6.7 %
on espeak): with the short window the one pass at the stop is already short, and the
forced prefix keeps a word two early passes agreed on wrongly.

No trimming by default. The transcriber's cut can carry the VAD's whole stop window (when
its clock drifted), and trailing silence is where whisper is said to invent words, so
:func:`trim_trailing` (last sound plus a margin) was tried on tiny.en: with 0.15, 1 and 3 s
of room noise after the speech it changed no WER beyond noise (57 vs 58 errors, 9 vs 11),
so it stays an option (``trim_margin_secs``). Trimming the start as well cost words
(tiny.en misses soft first consonants without the pre-roll).
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.audio.levels import amplitude, block_mean_squares
from pipeline.audio.resampling import resample
from pipeline.services.embedded import EmbeddedModels
from pipeline.services.local_agreement import LocalAgreement
from pipeline.services.stt import Transcript
from pipeline.services.whisper_decoder import UnsupportedLanguage, WhisperDecoder
from pipeline.services.whisper_decoding import (
    BASELINE_DECODING,
    SHORT_WINDOW_DECODING,
    TUNED_30S_DECODING,
    Decoding,
    collapse_repeats,
    find_repeat,
    with_name,
)

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

SAMPLE_RATE = 16000
_INT16_SCALE = np.float32(1.0 / 32768.0)
DEFAULT_DECODING = SHORT_WINDOW_DECODING


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


__all__ = [
    "BASELINE_DECODING",
    "DEFAULT_DECODING",
    "SHORT_WINDOW_DECODING",
    "TUNED_30S_DECODING",
    "Decoding",
    "LocalSTT",
    "LocalSTTStream",
    "UnsupportedLanguage",
    "collapse_repeats",
    "find_repeat",
    "language_problem",
    "transcribe_utterance",
    "trim_trailing",
    "with_name",
]


def language_problem(language: str, multilingual: bool, model: str = "whisper") -> str | None:
    """Why the whisper ``model`` cannot transcribe ``language``; None when it can."""
    if language == "en":
        return None
    if not multilingual:
        return (
            f"The speech-to-text model {model} is English-only; it cannot transcribe "
            f"{language!r}. Choose a multilingual model (whisper-base)."
        )
    from faster_whisper.tokenizer import _LANGUAGE_CODES  # ~0.5 s: only when needed

    if language not in _LANGUAGE_CODES:
        return f"Whisper knows no language {language!r}."
    return None


class LocalSTT:
    """:class:`~pipeline.services.stt.StreamingSTTService` on the shared embedded whisper.

    ``language``: a whisper language code; anything but "en" needs a multilingual model
    (:class:`UnsupportedLanguage` otherwise, raised here when the registry says which
    model it holds, else at the first call). Each :class:`Transcript` carries its own
    ``processing``: the seconds the transcription took in its worker (not counting time
    queued behind other calls).
    """

    def __init__(
        self,
        models: EmbeddedModels | None = None,
        decoding: Decoding = DEFAULT_DECODING,
        language: str = "en",
    ) -> None:
        self._models = models or EmbeddedModels.shared()
        self.decoding = decoding
        self.language = language
        spec = getattr(self._models, "stt_spec", None)
        problem = language_problem(
            language, getattr(spec, "multilingual", True), getattr(spec, "name", "whisper")
        )
        if problem is not None:  # now, at start-up, rather than at a caller's first words
            raise UnsupportedLanguage(problem)

    @property
    def model(self) -> str:
        spec = getattr(self._models, "stt_spec", None)
        return str(spec.name) if spec is not None else "whisper-tiny.en"

    async def transcribe(
        self, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE, *, prefix: str = ""
    ) -> Transcript:
        """One utterance's text; ``prefix``: words already agreed on, forced as the
        start of the text."""
        whisper = await self._models.stt.get()
        text, seconds = await self._models.stt.pool.run(
            transcribe_utterance, whisper, pcm, sample_rate, self.decoding, self.language, prefix
        )
        return Transcript(text, self.language, seconds)

    def open_stream(self) -> LocalSTTStream:
        return LocalSTTStream(self)

    def idle(self) -> bool:
        """Whether a call now would start at once: the model is loaded, a worker of the
        shared pool is free and nothing waits in its queue."""
        stt = self._models.stt
        if not stt.ready:
            return False
        stats = stt.pool.stats()
        return stats.busy < stats.max_workers and stats.queued == 0

    async def interim(self, pcm: np.ndarray, sample_rate: int, prefix: str) -> str | None:
        """One interim pass (the utterance so far), or None when the pool is not idle."""
        if not self.idle():
            return None
        whisper = await self._models.stt.get()  # loaded: returns at once
        text, _ = await self._models.stt.pool.run(
            interim_pass, whisper, pcm, sample_rate, self.decoding, self.language, prefix
        )
        return text


class LocalSTTStream:
    """One utterance transcribed while it is spoken (see the module docstring).
    ``passes`` and ``worker_seconds`` count its interim passes."""

    def __init__(self, stt: LocalSTT) -> None:
        self._stt = stt
        self.agreement = LocalAgreement()
        self.passes = 0
        self.worker_seconds = 0.0

    @property
    def committed(self) -> str:
        return self.agreement.text

    def idle(self) -> bool:
        return self._stt.idle()

    async def interim(self, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> str | None:
        """Decode the utterance so far; returns the committed text, or None when skipped
        because the pool was busy."""
        started = time.perf_counter()
        text = await self._stt.interim(pcm, sample_rate, self.agreement.prefix)
        if text is None:
            return None
        self.passes += 1
        self.worker_seconds += time.perf_counter() - started
        self.agreement.update(text)
        return self.agreement.text

    async def finish(self, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> Transcript:
        """The final text of the whole utterance: the committed words and the rest."""
        return await self._stt.transcribe(pcm, sample_rate, prefix=self.agreement.prefix)


@lru_cache(maxsize=8)
def decoder_for(whisper: WhisperModel, language: str) -> WhisperDecoder:
    """The short-window decoder of a loaded model (built once, in a worker)."""
    return WhisperDecoder(whisper, language)


def transcribe_utterance(
    whisper: WhisperModel,
    pcm: np.ndarray,
    sample_rate: int,
    decoding: Decoding,
    language: str = "en",
    prefix: str = "",
) -> tuple[str, float]:
    """(text, seconds it took) for one utterance; blocking, run it in a worker."""
    started = time.perf_counter()
    audio = to_whisper_input(pcm, sample_rate)
    if decoding.trim_margin_secs is not None:
        audio = trim_trailing(audio, decoding.trim_margin_secs)
    if audio.size == 0:
        return prefix.strip(), 0.0
    if decoding.window is not None or prefix or language != "en":
        text = decoder_for(whisper, language).decode(audio, decoding, prefix).text
        return text, time.perf_counter() - started
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


def interim_pass(
    whisper: WhisperModel,
    pcm: np.ndarray,
    sample_rate: int,
    decoding: Decoding,
    language: str,
    prefix: str,
) -> tuple[str, float]:
    """One interim pass: like :func:`transcribe_utterance` on the short window, but a
    doubtful no-speech verdict counts as silence (no 30 s re-check)."""
    started = time.perf_counter()
    audio = to_whisper_input(pcm, sample_rate)
    text = decoder_for(whisper, language).decode(audio, decoding, prefix, recheck=False).text
    return text, time.perf_counter() - started


def _decode(whisper: WhisperModel, audio: np.ndarray, options: dict[str, Any]) -> str:
    segments, _ = whisper.transcribe(audio, **options)
    # The segments are a generator: decoding happens here, in the worker.
    return "".join(segment.text for segment in segments).strip()
