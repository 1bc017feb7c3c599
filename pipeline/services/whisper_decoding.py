"""How the embedded whisper decodes one utterance: the :class:`Decoding` options and the
repeat guards, shared by the faster-whisper path and our own short-window decoder.

:data:`DEFAULT_DECODING` was tuned on the generated evaluation set (``bench/stt_wer.py``:
60 sentences with numbers and names, in espeak-ng and the embedded hibari voice);
:data:`BASELINE_DECODING` is the decoding used before, kept so the bench can compare.
What the tuning found on tiny.en:

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
- ``max_new_tokens`` is bounded by the utterance's length, so a runaway loop cannot cost
  seconds of decoding.

Split out of :mod:`pipeline.services.local_stt` so the short-window decoder
(:mod:`pipeline.services.whisper_decoder`) and the service can both use it without an
import cycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

MAX_NEW_TOKENS = 440  # whisper's 448 minus the prompt (4 tokens without timestamps)
_FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # faster-whisper's default


@dataclass(frozen=True, slots=True)
class Decoding:
    """How one utterance is decoded (faster-whisper options plus our own guards).

    ``temperatures``: the first is the decoding; later ones are the fallback, tried when a
    result's compression ratio or mean log-probability is past its threshold (the
    faster-whisper path only). ``repeat_ngram_retry``: when the transcript repeats a
    phrase, decode again with n-grams of this size banned (0: no retry);
    ``collapse_repeats`` then cuts any loop still there to one copy. ``trim_margin_secs``:
    keep this much after the last sound (None: no trimming). ``tokens_per_second``: cap on
    the tokens decoded per second of audio, plus ``min_tokens`` (None: whisper's own limit
    of 448). ``window``: the encoder's input, see
    :class:`~pipeline.services.whisper_decoder.Window` (None: faster-whisper's
    ``transcribe`` and its fixed 30 s window).
    """

    name: str
    beam_size: int = 1
    temperatures: tuple[float, ...] = _FALLBACK_TEMPERATURES
    compression_ratio_threshold: float | None = 2.4
    log_prob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    doubt_no_speech: float = 0.3  # short windows: see whisper_decoder._verdict
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    repeat_ngram_retry: int = 0
    collapse_repeats: bool = False
    trim_margin_secs: float | None = None
    tokens_per_second: float | None = None
    min_tokens: int = 32
    window: tuple[float, float, float] | None = None  # (step, margin, minimum) seconds
    extra: dict[str, Any] = field(default_factory=dict)

    def max_new_tokens(self, seconds: float) -> int:
        """Tokens one decode of ``seconds`` of audio may generate."""
        if self.tokens_per_second is None:
            return MAX_NEW_TOKENS
        # Per 30 s window, and whisper's context (448) also holds the prompt tokens.
        wanted = self.min_tokens + round(self.tokens_per_second * min(seconds, 30.0))
        return min(MAX_NEW_TOKENS, wanted)

    def options(self, seconds: float, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for ``WhisperModel.transcribe`` on ``seconds`` of audio."""
        options: dict[str, Any] = {
            "language": "en",
            "beam_size": self.beam_size,
            "temperature": list(self.temperatures),
            "compression_ratio_threshold": self.compression_ratio_threshold,
            "log_prob_threshold": self.log_prob_threshold,
            "no_speech_threshold": self.no_speech_threshold,
            "repetition_penalty": self.repetition_penalty,
            "no_repeat_ngram_size": self.no_repeat_ngram_size,
            "vad_filter": False,  # our VAD already cut the utterance
            "condition_on_previous_text": False,  # one utterance: no earlier text
            "without_timestamps": True,
        }
        if self.tokens_per_second is not None:
            options["max_new_tokens"] = self.max_new_tokens(seconds)
        return {**options, **self.extra, **overrides}


BASELINE_DECODING = Decoding("baseline")
TUNED_30S_DECODING = Decoding(
    "tuned",
    beam_size=5,
    temperatures=(0.0,),
    repeat_ngram_retry=2,
    collapse_repeats=True,
    tokens_per_second=8.0,
)
# The tuned decoding over a window the utterance's length plus 1 s, at least 12 s (see
# whisper_decoder). Measured with whisper base on 30 sentences of bench/stt_wer.py (espeak,
# hibari, each clean and with pink noise at 10 dB SNR): at least 4 s: 12.2/1.5/12.6/1.5 %
# WER (and whole sentences said twice); 8 s: 7.0/1.8/13.7/1.1 %; 12 s: 6.7/1.5/11.5/0.7 %
# in 0.31 s per utterance; 16 s: no better, slower; the 30 s window: 4.8/1.1/11.1/0.7 % in
# 1.0-1.3 s. Whisper tiny.en over 30 s: 9.6/0.7/17.0/1.8 % in 0.52 s.
SHORT_WINDOW_DECODING = replace(TUNED_30S_DECODING, name="short", window=(2.0, 1.0, 12.0))


def with_name(decoding: Decoding, name: str, **changes: Any) -> Decoding:
    """A variant of ``decoding`` (for the bench's comparisons)."""
    return replace(decoding, name=name, **changes)


_WORD = re.compile(r"\S+")


def word_key(word: str) -> str:
    """A word as compared: lower case, without punctuation."""
    return re.sub(r"[^\w]", "", word.lower())


def find_repeat(text: str) -> tuple[int, int, int] | None:
    """The first loop in ``text``: a phrase of two or more words said twice or more in a
    row, or one word four times or more ("no no no" is something people say). Returns
    (first word, phrase length, copies) counted in words, or None. Case and punctuation
    do not count ("in Paris, in Paris")."""
    words = [word_key(w) for w in _WORD.findall(text)]
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
