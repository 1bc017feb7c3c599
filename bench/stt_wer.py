"""Word error rate and transcription time of the embedded whisper models, per decoding.

The evaluation set is ``testkit/stt_sentences.py``: 60 generated sentences with numbers
and names, in two voices (espeak-ng en-us and the embedded hibari voice), framed as the
transcriber sends them (0.3 s pre-roll, ``--tails`` seconds after the speech, a faint
noise floor). Each voice is also heard with noise at ``--snr`` dB (``+noise``): pink
noise, seeded by the sentence, mixed over the whole utterance at that ratio to the
speech's power. Renderings are cached in a temporary folder, so only the first run
renders.

Models (``--models``): ``tiny.en`` (the packaged whisper tiny.en) and ``base`` (whisper
base, multilingual, from ``--base-path``). Text is normalised before counting
(``testkit/wer.py``); WER is over the whole set: all errors / all reference words.

``--line``: ``phone`` (8 kHz G.711 μ-law, :mod:`testkit.phone_line`), or either half of
it alone: ``band8k`` (the 8 kHz band limit) and ``mulaw16k`` (the companding at 16 kHz).
``--suppression off,rnnoise`` also hears each utterance through RNNoise
(:mod:`pipeline.audio.noise_suppression`; labels ``+ns``), after the ``--line``.

Decodings (``--decodings``, comma-separated): ``tuned`` (faster-whisper's ``transcribe``,
30 s window, beam 5, repeat guards), ``short`` (the same guards, our own decode over a
window of the utterance's length: :data:`pipeline.services.local_stt.SHORT_WINDOW_DECODING`),
``baseline`` (before tuning) and variants: ``own30`` (our decode over the 30 s window),
``short-min8`` (window at least 8 s), ``short-step5`` (5 s steps), ``short-greedy``.
Each utterance is transcribed by every decoding in turn, so a busy machine slows them
alike. Time is per utterance (one call at a time, two threads): median, p95.

    .venv/bin/python -m bench.stt_wer                                  # both models, tuned vs short
    .venv/bin/python -m bench.stt_wer --models base --limit 20 --decodings short,short-min8
    .venv/bin/python -m bench.stt_wer --limit 10 --verbose             # every wrong transcript
    .venv/bin/python -m bench.stt_wer --models tiny.en --decodings short --line phone  # 8 kHz μ-law
    .venv/bin/python -m bench.stt_wer --models tiny.en --decodings short --suppression off,rnnoise
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.audio.resampling import resample
from pipeline.services.embedded import EmbeddedConfig, EmbeddedModels, load_whisper, warm_whisper
from pipeline.services.local_stt import (
    BASELINE_DECODING,
    SHORT_WINDOW_DECODING,
    TUNED_30S_DECODING,
    Decoding,
    find_repeat,
    transcribe_utterance,
    with_name,
)
from testkit.denoise import suppress
from testkit.phone_line import phone_line
from testkit.stt_sentences import SENTENCES, VOICES, speech, utterance
from testkit.wer import normalise, word_errors

VARIANTS: dict[str, Decoding] = {
    "baseline": BASELINE_DECODING,
    "tuned": TUNED_30S_DECODING,
    "short": with_name(SHORT_WINDOW_DECODING, "short"),
    "own30": with_name(SHORT_WINDOW_DECODING, "own30", window=(30.0, 0.0, 30.0)),
    "short-min8": with_name(SHORT_WINDOW_DECODING, "short-min8", window=(2.0, 1.0, 8.0)),
    "short-step5": with_name(SHORT_WINDOW_DECODING, "short-step5", window=(5.0, 1.0, 5.0)),
    "short-min12": with_name(SHORT_WINDOW_DECODING, "short-min12", window=(2.0, 1.0, 12.0)),
    "short-min16": with_name(SHORT_WINDOW_DECODING, "short-min16", window=(2.0, 1.0, 16.0)),
    "short-greedy": with_name(SHORT_WINDOW_DECODING, "short-greedy", beam_size=1),
}


def mulaw_16k(pcm: np.ndarray) -> np.ndarray:
    """G.711's μ-law companding (8-bit, μ = 255) without its 8 kHz band limit."""
    x = pcm.astype(np.float64) / 32768.0
    coded = np.round(np.sign(x) * np.log1p(255 * np.abs(x)) / np.log1p(255) * 127) / 127
    out = np.sign(coded) * np.expm1(np.abs(coded) * np.log1p(255)) / 255 * 32768.0
    return np.clip(np.round(out), -32768, 32767).astype(np.int16)


def band_8k(pcm: np.ndarray) -> np.ndarray:
    """The 8 kHz band limit alone: down to 8 kHz and back up, no companding."""
    return resample(resample(pcm, 16000, 8000), 8000, 16000)[: pcm.size]


# What the STT hears (``--line``): as sent, through a phone line (8 kHz G.711 μ-law, as
# phone media streams deliver it), or one half of that line alone.
LINES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "wide": lambda pcm: pcm,
    "phone": phone_line,
    "mulaw16k": mulaw_16k,
    "band8k": band_8k,
}


def load_model(name: str, base_path: str) -> Any:
    """A loaded, warmed whisper: ``tiny.en`` or ``base`` (the registry's, joined from its
    packages, unless ``base_path`` names a folder)."""
    if name == "tiny.en":
        return asyncio.run(EmbeddedModels(stt="whisper-tiny.en").stt.get())
    if not base_path:
        return asyncio.run(EmbeddedModels(stt="whisper-base").stt.get())
    whisper = load_whisper(Path(base_path), EmbeddedConfig())
    warm_whisper(whisper)
    return whisper


def pink_noise(size: int, seed: int) -> np.ndarray:
    """Seeded pink (1/f power) noise of unit RMS."""
    spectrum = np.fft.rfft(np.random.default_rng(seed).normal(0.0, 1.0, size))
    spectrum /= np.sqrt(np.maximum(np.arange(spectrum.size), 1.0))
    noise = np.fft.irfft(spectrum, size)
    return noise / max(float(np.sqrt(np.mean(noise**2))), 1e-12)


def noisy(text: str, voice: str, snr_db: float, after: float) -> np.ndarray:
    """The framed utterance with pink noise ``snr_db`` below the speech's power."""
    clean = utterance(text, voice, after=after).astype(np.float64)
    power = float(np.mean(speech(text, voice).astype(np.float64) ** 2))
    seed = int.from_bytes(hashlib.sha256(f"noise {text}".encode()).digest()[:4], "little")
    mixed = clean + pink_noise(clean.size, seed) * np.sqrt(power / 10 ** (snr_db / 10))
    return np.clip(np.round(mixed), -32768, 32767).astype(np.int16)


def conditions(voices: str, snr: float | None) -> list[tuple[str, str, float | None]]:
    """(label, voice, snr) per condition: every voice clean, then with noise."""
    clean = [(v, v, None) for v in voices.split(",")]
    return clean + ([(f"{v}+noise", v, snr) for v in voices.split(",")] if snr else [])


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


def run_model(model: str, args: argparse.Namespace, tallies: dict[tuple, Tally]) -> None:
    whisper = load_model(model, args.base_path)
    decodings = [VARIANTS[name] for name in args.decodings.split(",")]
    for label, voice, snr in conditions(args.voices, args.snr):
        for tail in (float(t) for t in args.tails.split(",")):
            for sentence in SENTENCES[: args.limit]:
                if snr is None:
                    pcm = utterance(sentence, voice, after=tail)
                else:
                    pcm = noisy(sentence, voice, snr, tail)
                pcm = LINES[args.line](pcm)
                for heard, audio in suppressions(pcm, args.suppression):
                    for decoding in decodings:
                        text, seconds = transcribe_utterance(whisper, audio, 16000, decoding)
                        key = (model, decoding.name, label + heard, tail)
                        if tallies.setdefault(key, Tally()).add(sentence, text, seconds) and (
                            args.verbose
                        ):
                            want = " ".join(normalise(sentence))
                            print(f"  {' '.join(map(str, key))} {text!r}\n  want: {want}")


def suppressions(pcm: np.ndarray, names: str) -> list[tuple[str, np.ndarray]]:
    """The utterance as the STT hears it per ``--suppression``: as it came (``off``) and
    through RNNoise (``rnnoise``: label ``+ns``, warmed on the utterance's pre-roll)."""
    heard = []
    for name in names.split(","):
        heard.append(("", pcm) if name == "off" else ("+ns", suppress(pcm)))
    return heard


def run(args: argparse.Namespace) -> dict[str, Any]:
    tallies: dict[tuple, Tally] = {}
    for model in args.models.split(","):
        run_model(model, args, tallies)
    return {" ".join(map(str, key)): t.row() for key, t in tallies.items()}


def print_table(report: dict[str, Any]) -> None:
    print(f"{'model / decoding / voice / tail':40} {'WER':>6} {'errors':>11} {'wrong':>6} "
          f"{'loops':>5} {'median s':>9} {'p95 s':>6}")  # fmt: skip
    for key, row in report.items():
        print(f"{key:40} {row['wer']:6.1%} {row['errors']:>5}/{row['words']:<5} "
              f"{row['wrong_sentences']:>3}/{row['sentences']:<2} {row['loops']:>5} "
              f"{row['median_s']:9.2f} {row['p95_s']:6.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="tiny.en,base", help="of tiny.en, base")
    parser.add_argument("--base-path", default="", help="whisper base folder ('' = the registry's)")
    parser.add_argument("--decodings", default="tuned,short", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--voices", default=",".join(VOICES))
    parser.add_argument("--snr", type=float, default=10.0, help="dB of the noisy runs (0: none)")
    parser.add_argument("--tails", default="0.15", help="seconds of sound after the speech")
    parser.add_argument("--limit", type=int, default=len(SENTENCES), help="first N sentences")
    parser.add_argument("--line", choices=tuple(LINES), default="wide")
    parser.add_argument(
        "--suppression", default="off", help="of off, rnnoise (comma-separated: both, '+ns')"
    )
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
