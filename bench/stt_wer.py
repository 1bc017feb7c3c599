"""Word error rate and transcription time of the embedded whisper tiny.en, per decoding.

The evaluation set is ``testkit/stt_sentences.py``: 60 generated sentences with numbers
and names, in two voices (espeak-ng en-us and the embedded hibari voice), framed as the
transcriber sends them (0.3 s pre-roll, ``--tails`` seconds after the speech, a faint
noise floor). A tail of 0.15 s is the transcriber's normal cut; 1.0 s stands for the
cut that carries the VAD's whole stop window (when the frames' clock drifted).
Renderings are cached in a temporary folder, so only the first run renders.

Text is normalised before counting (``testkit/wer.py``): lower case, punctuation dropped,
numbers as spoken words (whisper's ``$20``, ``7:30``, ``12th`` become ``twenty
dollars``, ``seven thirty``, ``twelfth``), common contractions expanded. WER is over the
whole set: all errors / all reference words.

Decodings (``--decodings``, comma-separated): ``baseline`` (before tuning), ``tuned``
(:data:`pipeline.services.local_stt.DEFAULT_DECODING`) and variants for comparison:
``beam5`` (baseline with a beam of 5), ``no-fallback`` (baseline at temperature 0
only), ``tuned-fallback`` (tuned with the temperature fallback), ``tuned-greedy`` (tuned
with a beam of 1), ``tuned-trim`` (tuned, the end trimmed to the last sound + 0.3 s),
``tuned-no-retry`` (tuned without the repeat guards). Each utterance is transcribed by
every decoding in turn, so a busy machine slows them alike. Time is per utterance in
this process (one call at a time, the embedded model's own two threads): median, p95.

    .venv/bin/python -m bench.stt_wer                        # baseline vs tuned
    .venv/bin/python -m bench.stt_wer --tails 0.15,3.0 --decodings baseline,tuned,tuned-trim
    .venv/bin/python -m bench.stt_wer --limit 10 --verbose   # show every wrong transcript
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.services.embedded import EmbeddedModels
from pipeline.services.local_stt import (
    BASELINE_DECODING,
    DEFAULT_DECODING,
    Decoding,
    find_repeat,
    transcribe_utterance,
    with_name,
)
from testkit.stt_sentences import SENTENCES, VOICES, utterance
from testkit.wer import normalise, word_errors

VARIANTS: dict[str, Decoding] = {
    "baseline": BASELINE_DECODING,
    "tuned": DEFAULT_DECODING,
    "beam5": with_name(BASELINE_DECODING, "beam5", beam_size=5),
    "tuned-fallback": with_name(
        DEFAULT_DECODING, "tuned-fallback", temperatures=BASELINE_DECODING.temperatures
    ),
    "tuned-greedy": with_name(DEFAULT_DECODING, "tuned-greedy", beam_size=1),
    "no-fallback": with_name(BASELINE_DECODING, "no-fallback", temperatures=(0.0,)),
    "tuned-trim": with_name(DEFAULT_DECODING, "tuned-trim", trim_margin_secs=0.3),
    "tuned-no-retry": with_name(
        DEFAULT_DECODING, "tuned-no-retry", repeat_ngram_retry=0, collapse_repeats=False
    ),
}


@dataclass
class Tally:
    errors: int = 0
    words: int = 0
    wrong: int = 0  # sentences with at least one error
    loops: int = 0  # transcripts with a repeated phrase
    seconds: list[float] = field(default_factory=list)

    def add(self, reference: str, text: str, seconds: float) -> int:
        errors, words = word_errors(reference, text)
        self.errors += errors
        self.words += words
        self.wrong += errors > 0
        self.loops += find_repeat(text) is not None
        self.seconds.append(seconds)
        return errors

    def row(self) -> dict[str, Any]:
        times = np.array(self.seconds)
        return {
            "wer": round(self.errors / max(1, self.words), 4),
            "errors": self.errors,
            "words": self.words,
            "wrong_sentences": self.wrong,
            "sentences": len(self.seconds),
            "loops": self.loops,
            "median_s": round(float(np.median(times)), 3),
            "p95_s": round(float(np.percentile(times, 95)), 3),
        }


def run(args: argparse.Namespace) -> dict[str, Any]:
    whisper = asyncio.run(EmbeddedModels().stt.get())  # loaded and warmed once
    decodings = [VARIANTS[name] for name in args.decodings.split(",")]
    sentences = SENTENCES[: args.limit]
    tallies: dict[tuple[str, str, float], Tally] = {}
    for voice in args.voices.split(","):
        for tail in (float(t) for t in args.tails.split(",")):
            for sentence in sentences:
                pcm = utterance(sentence, voice, after=tail)
                for decoding in decodings:
                    text, seconds = transcribe_utterance(whisper, pcm, 16000, decoding)
                    tally = tallies.setdefault((decoding.name, voice, tail), Tally())
                    if tally.add(sentence, text, seconds) and args.verbose:
                        want = " ".join(normalise(sentence))
                        print(f"  {decoding.name:14} {voice:6} {tail:4} {text!r}\n  want: {want}")
    return {f"{name} {voice} tail={tail}": t.row() for (name, voice, tail), t in tallies.items()}


def print_table(report: dict[str, Any]) -> None:
    print(f"{'decoding / voice / tail':34} {'WER':>6} {'errors':>11} {'wrong':>6} "
          f"{'loops':>5} {'median s':>9} {'p95 s':>6}")  # fmt: skip
    for key, row in sorted(report.items()):
        print(f"{key:34} {row['wer']:6.1%} {row['errors']:>5}/{row['words']:<5} "
              f"{row['wrong_sentences']:>3}/{row['sentences']:<2} {row['loops']:>5} "
              f"{row['median_s']:9.2f} {row['p95_s']:6.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decodings", default="baseline,tuned", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--voices", default=",".join(VOICES))
    parser.add_argument("--tails", default="0.15", help="seconds of sound after the speech")
    parser.add_argument("--limit", type=int, default=len(SENTENCES), help="first N sentences")
    parser.add_argument("--verbose", action="store_true", help="print every wrong transcript")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    report = run(args)
    print_table(report)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)


if __name__ == "__main__":
    main()
