"""The VAD in steady noise, with RNNoise before it or not, and what RNNoise costs a frame.

Per voice (espeak-ng, the embedded hibari) and line (``wide``, ``phone``: 8 kHz G.711
μ-law, :mod:`testkit.phone_line`): ``--sentences`` evaluation sentences with ``--gap`` s
of noise alone before, between and after them, under pink noise ``--snr`` dB below the
speech's power that never stops (:func:`testkit.denoise.in_noise`). The real Silero VAD,
at the server's defaults (start 0.2 s, stop 0.2 s), hears the stream frame by frame as it
came (``off``) and through one stream's
:class:`~pipeline.audio.noise_suppression.NoiseSuppressor` (``rnnoise``; its events dated
back by its latency, as :mod:`pipeline.hearing.inbound` does). Per condition:

- false starts: ``SpeechStarted`` in the noise alone (0.3 s or more from any sentence),
  and false onsets (``SpeechOnset`` there: where a barge-in would pause the bot);
- sentences heard (a start within the sentence), and speech split in two;
- the onset's and the end's error against the true times, median and p95, ms.

Then the suppressor's cost per 20 ms frame (median, p95, µs). WER with and without it:
``bench/stt_wer.py --suppression off,rnnoise``.

    .venv/bin/python bench/noise_suppression.py
    .venv/bin/python bench/noise_suppression.py --snr 0 --voices espeak --lines phone
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from typing import Any

import numpy as np

from pipeline.audio.noise_suppression import LATENCY, NoiseSuppressor
from pipeline.events import Event, SpeechOnset, SpeechStarted, SpeechStopped
from pipeline.hearing.rnnoise import shared_rnnoise
from pipeline.hearing.vad import VADAnalyzer, VADParams
from testkit.denoise import in_noise
from testkit.phone_line import phone_line
from testkit.stt_sentences import VOICES
from testkit.vad_feed import frames

MARGIN = 0.3  # seconds around a sentence where a start is not false


def heard(samples: np.ndarray, suppression: str) -> list[Event]:
    """The VAD's events on the stream, fed as a call feeds it."""
    vad = VADAnalyzer(VADParams(start_secs=0.2, stop_secs=0.2))
    suppressor = NoiseSuppressor(shared_rnnoise()) if suppression == "rnnoise" else None
    events: list[Event] = []
    for frame, t in frames(samples):
        if suppressor is not None:
            events += vad.push(suppressor.process(frame), t - LATENCY)
        else:
            events += vad.push(frame, t)
    if suppressor is not None:
        suppressor.close()
    return events


def score(events: list[Event], truth: list[tuple[float, float]]) -> dict[str, Any]:
    """False starts and onsets, sentences heard, splits, onset and end errors (ms)."""
    starts = [e.t for e in events if isinstance(e, SpeechStarted)]
    onsets = [e.t for e in events if isinstance(e, SpeechOnset)]
    stops = [e.t for e in events if isinstance(e, SpeechStopped)]

    def in_speech(t: float) -> bool:
        return any(a - MARGIN <= t <= b + MARGIN for a, b in truth)

    onset_err, end_err, heard_count, splits = [], [], 0, 0
    for a, b in truth:
        mine = [t for t in starts if a - MARGIN <= t <= b]
        ends = [t for t in stops if a <= t <= b + 1.5]
        heard_count += bool(mine)
        splits += max(0, len(mine) - 1)
        if mine:
            onset_err.append((mine[0] - a) * 1000)
        if ends:
            end_err.append((ends[-1] - b) * 1000)

    def stats(values: list[float]) -> tuple[float, float]:
        if not values:
            return (float("nan"), float("nan"))
        return (round(float(np.median(values))), round(float(np.percentile(values, 95))))

    return {
        "false_starts": sum(not in_speech(t) for t in starts),
        "false_onsets": sum(not in_speech(t) for t in onsets),
        "heard": f"{heard_count}/{len(truth)}",
        "splits": splits,
        "onset_ms": stats(onset_err),
        "end_ms": stats(end_err),
        "noise_alone_s": round(noise_alone(truth), 1),
    }


def noise_alone(truth: list[tuple[float, float]]) -> float:
    """Seconds of noise alone (away from speech by MARGIN) in the stream."""
    gaps = [b2 - MARGIN - (a1 + MARGIN) for (_, a1), (b2, _) in itertools.pairwise(truth)]
    return sum(max(0.0, g) for g in gaps) + 2 * max(0.0, truth[0][0] - MARGIN)


def cost(frames_count: int) -> dict[str, float]:
    """µs per 20 ms frame of one suppressor on speech in noise (median, p95)."""
    samples, _ = in_noise("hibari", 2)
    suppressor = NoiseSuppressor(shared_rnnoise())
    feed = [f for f, _ in frames(samples)][:frames_count]
    took = []
    for frame in feed:
        started = time.perf_counter()
        suppressor.process(frame)
        took.append((time.perf_counter() - started) * 1e6)
    suppressor.close()
    return {
        "median_us": round(float(np.median(took))),
        "p95_us": round(float(np.percentile(took, 95))),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"snr_db": args.snr, "conditions": {}}
    for voice in args.voices.split(","):
        samples, truth = in_noise(voice, args.sentences, args.snr, args.gap)
        for line in args.lines.split(","):
            stream = phone_line(samples) if line == "phone" else samples
            for suppression in ("off", "rnnoise"):
                row = score(heard(stream, suppression), truth)
                report["conditions"][f"{voice} {line} {suppression}"] = row
                print(f"{voice:7} {line:5} {suppression:8} {json.dumps(row)}", flush=True)
    report["cost"] = cost(args.frames)
    return report


def markdown(report: dict[str, Any]) -> str:
    rows = [
        "| voice / line / suppression | false starts (onsets) | heard | splits "
        "| onset error p50 / p95 ms | end error p50 / p95 ms |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for key, r in report["conditions"].items():
        rows.append(
            f"| {key} | {r['false_starts']} ({r['false_onsets']}) in {r['noise_alone_s']} s "
            f"| {r['heard']} | {r['splits']} | {r['onset_ms'][0]} / {r['onset_ms'][1]} "
            f"| {r['end_ms'][0]} / {r['end_ms'][1]} |"
        )
    c = report["cost"]
    rows.append(f"\nRNNoise per 20 ms frame: {c['median_us']} µs median, {c['p95_us']} µs p95")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--voices", default=",".join(VOICES))
    parser.add_argument("--lines", default="wide,phone", help="of wide, phone")
    parser.add_argument("--snr", type=float, default=10.0, help="dB below the speech's power")
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--gap", type=float, default=2.0, help="seconds of noise alone")
    parser.add_argument("--frames", type=int, default=500, help="frames timed for the cost")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    report = run(args)
    print()
    print(markdown(report))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)


if __name__ == "__main__":
    main()
