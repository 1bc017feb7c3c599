"""Whisper over a window the utterance's length, with our own decode call.

faster-whisper's ``transcribe`` pads every input's log-mel features to whisper's 30 s
window (3000 frames; its ``chunk_length`` does not change that), and the encoder's cost
follows the window, not the speech: measured here (2 threads, int8), the encoder alone
took 0.80 s at 3000 frames, 0.13 s at 1000 and 0.07 s at 500 for whisper base (tiny.en:
0.30 / 0.06 / 0.03 s). CTranslate2's ``Whisper.encode`` / ``generate`` accept shorter
inputs, so :class:`WhisperDecoder` computes the features itself (faster-whisper's
``FeatureExtractor``), pads them with zeros, as faster-whisper does, only to the
utterance's length plus a margin, rounded up to a step (the :class:`Decoding`'s
``window``: a few fixed sizes, so the model sees few shapes), and calls
``model.generate`` with the prompt faster-whisper would build (sot, language, task,
notimestamps). Whisper was trained on 30 s windows; ``bench/stt_wer.py`` compares both
on the evaluation set (figures in its docstring).

Running the decode ourselves also gives what the streaming transcriber needs: words
already agreed on are forced as the decoder's prefix (the tokens after
``<|notimestamps|>``), so only the rest is generated; the encoder's output is computed
once and reused by the repeat retry.

The guards are those of the tuned decoding: beam search, the repeat retry with word
pairs banned and the collapse of loops left, ``max_new_tokens`` bounded by the
utterance's length, and faster-whisper's no-speech rule (no-speech probability over its
threshold and a mean log-probability under its own: silence and noise give "").
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.services.whisper_decoding import Decoding, collapse_repeats, find_repeat

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

SAMPLE_RATE = 16000
_FRAMES_PER_SECOND = 100  # whisper's hop is 10 ms
_FULL_FRAMES = 3000  # whisper's 30 s window
_MAX_LENGTH = 448  # whisper's text context: prompt plus generated tokens


class UnsupportedLanguage(ValueError):
    """The model cannot transcribe that language (an English-only model, a bad code)."""


def window_frames(samples: int, window: tuple[float, float, float] | None) -> int:
    """Mel frames the encoder gets for ``samples`` of 16 kHz audio: the length plus
    ``margin``, rounded up to a multiple of ``step``, at least ``minimum``, at most
    whisper's 30 s. ``window`` = (step, margin, minimum) seconds; None: always 30 s."""
    if window is None:
        return _FULL_FRAMES
    step, margin, minimum = window
    seconds = samples / SAMPLE_RATE + margin
    wanted = max(minimum, math.ceil(seconds / step - 1e-9) * step)
    frames = round(wanted * _FRAMES_PER_SECOND)
    return min(_FULL_FRAMES, frames + frames % 2)  # the encoder's conv halves it


@dataclass(frozen=True, slots=True)
class Decoded:
    """One decode: ``text`` (the prefix's words and the new ones), whether the
    no-speech rule emptied it, and the seconds it took."""

    text: str
    no_speech: bool
    seconds: float


class WhisperDecoder:
    """Short-window decoding of one utterance on a loaded faster-whisper model, in one
    ``language``. Blocking: call it in the STT pool's worker. Safe to share between
    threads (it holds no per-call state)."""

    def __init__(self, whisper: WhisperModel, language: str = "en") -> None:
        from faster_whisper.tokenizer import _LANGUAGE_CODES, Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        multilingual = whisper.model.is_multilingual
        if language != "en" and not multilingual:
            raise UnsupportedLanguage(
                f"This whisper model is English-only; it cannot transcribe {language!r}. "
                "Use a multilingual model (whisper-base) or language 'en'."
            )
        if language not in _LANGUAGE_CODES:
            raise UnsupportedLanguage(f"Whisper knows no language code {language!r}.")
        self.language = language
        self.multilingual = multilingual
        self._whisper = whisper
        self._tokenizer = Tokenizer(
            whisper.hf_tokenizer, multilingual, task="transcribe", language=language
        )
        self._prompt = [*self._tokenizer.sot_sequence, self._tokenizer.no_timestamps]
        self._suppress = list(get_suppressed_tokens(self._tokenizer, [-1]))

    def features(self, audio: np.ndarray, window: tuple[float, float, float] | None) -> np.ndarray:
        """Log-mel features [1, 80, frames] of float32 16 kHz ``audio``, zero-padded (as
        faster-whisper pads them) to :func:`window_frames`."""
        mel = self._whisper.feature_extractor(audio)  # [80, samples // 160 + 1]
        content = mel[:, : mel.shape[-1] - 1]  # faster-whisper drops the padding's frame
        frames = window_frames(audio.size, window)
        padded = np.zeros((1, content.shape[0], frames), np.float32)
        kept = min(frames, content.shape[-1])
        padded[0, :, :kept] = content[:, :kept]
        return padded

    def decode(
        self, audio: np.ndarray, decoding: Decoding, prefix: str = "", *, recheck: bool = True
    ) -> Decoded:
        """Transcribe float32 16 kHz ``audio``; ``prefix``: words forced as the start of
        the text (only the rest is generated, and the no-speech rule is off: the words
        were heard already). A doubtful result (see :meth:`_verdict`) is decided on the
        full 30 s window when ``recheck``, else counts as no speech (interim passes)."""
        started = time.perf_counter()
        if audio.size == 0:
            return Decoded(prefix.strip(), False, 0.0)
        text, verdict = self._decode_window(audio, decoding, prefix, decoding.window)
        if verdict == "doubtful" and recheck and decoding.window is not None:
            text, verdict = self._decode_window(audio, decoding, prefix, None)
        if verdict != "speech":
            text = ""
        return Decoded(text, verdict != "speech", time.perf_counter() - started)

    def _decode_window(
        self,
        audio: np.ndarray,
        decoding: Decoding,
        prefix: str,
        window: tuple[float, float, float] | None,
    ) -> tuple[str, str]:
        import ctranslate2

        features = ctranslate2.StorageView.from_array(self.features(audio, window))
        encoded = self._whisper.model.encode(features)
        seconds = audio.size / SAMPLE_RATE
        text, verdict = self._generate(encoded, prefix, decoding, seconds, {}, window)
        if verdict == "speech" and decoding.repeat_ngram_retry and find_repeat(text):
            banned = {"no_repeat_ngram_size": decoding.repeat_ngram_retry}
            retry, _ = self._generate(encoded, prefix, decoding, seconds, banned, window)
            if retry and find_repeat(retry) is None:
                text = retry
        if decoding.collapse_repeats:
            text = collapse_repeats(text)
        return text, verdict

    def prefix_tokens(self, prefix: str) -> list[int]:
        """``prefix`` as the decoder's forced tokens (as faster-whisper's ``prefix``)."""
        if not prefix.strip():
            return []
        return list(self._tokenizer.encode(" " + prefix.strip()))[: _MAX_LENGTH // 2 - 1]

    def _generate(
        self,
        encoded: Any,
        prefix: str,
        decoding: Decoding,
        seconds: float,
        overrides: dict[str, Any],
        window: tuple[float, float, float] | None,
    ) -> tuple[str, str]:
        forced = self.prefix_tokens(prefix)
        prompt = self._prompt + forced
        max_new = decoding.max_new_tokens(seconds)
        options: dict[str, Any] = {
            "beam_size": decoding.beam_size,
            "repetition_penalty": decoding.repetition_penalty,
            "no_repeat_ngram_size": decoding.no_repeat_ngram_size,
            "max_length": min(_MAX_LENGTH, len(prompt) + max_new),
            "return_scores": True,
            "return_no_speech_prob": True,
            "suppress_blank": True,
            "suppress_tokens": self._suppress,
        }
        result = self._whisper.model.generate(encoded, [prompt], **{**options, **overrides})[0]
        tokens = result.sequences_ids[0]
        text = self._tokenizer.decode(forced + tokens).strip()
        if forced:
            return text, "speech"
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        return text, _verdict(decoding, result.no_speech_prob, avg_logprob, window)


def _verdict(
    decoding: Decoding,
    no_speech_prob: float,
    avg_logprob: float,
    window: tuple[float, float, float] | None,
) -> str:
    """ "speech", "silence" or "doubtful". faster-whisper's rule: silence when the
    no-speech probability is over its threshold, unless the words are likely enough
    (mean log-probability over its threshold). A short window lowers the no-speech
    probability of noise (measured on whisper base: 0.46-0.60 on 1-3 s of faint white
    noise that hallucinated "Now I'm going to add some salt", while the 30 s window said
    nothing); so, on a short window, unlikely words with a no-speech probability over
    ``doubt_no_speech`` are doubtful, and decided on the full window."""
    threshold, floor = decoding.no_speech_threshold, decoding.log_prob_threshold
    if threshold is None:
        return "speech"
    likely = floor is not None and avg_logprob > floor
    if no_speech_prob > threshold and not likely:
        return "silence"
    if window is not None and no_speech_prob > decoding.doubt_no_speech and not likely:
        return "doubtful"
    return "speech"
