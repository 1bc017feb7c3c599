"""Sentence aggregation cost: streamed tokens through ``SentenceAggregator.push``.

Streams of word-sized tokens, each aggregated as one answer: ``prose`` (a sentence
every 12 words), ``commas`` (the only punctuation), ``unpunctuated`` (the whole answer
stays in the buffer) and ``lowercase`` (a period every 12 words, each followed by a
lower-case word, so none ends a sentence: every period is a candidate that is turned
down). Prints a Markdown table: the whole stream's time (median of ``--repeats`` runs)
and the median and p99 cost of one push. Bounded: ``--tokens`` tokens per stream.

    .venv/bin/python -m bench.sentences [--tokens 20000] [--repeats 5] [--kinds prose,...]
"""

from __future__ import annotations

import argparse
import statistics
import time

from pipeline.reply.sentences import SentenceAggregator

WORDS = "the quick brown fox jumps over a lazy dog while we wait for".split()


KINDS = ("prose", "commas", "unpunctuated", "lowercase")


def tokens(count: int, kind: str) -> list[str]:
    out: list[str] = []
    for n in range(count):
        word = WORDS[n % len(WORDS)]
        if kind in ("prose", "lowercase") and n % 12 == 11:
            word += "."
        elif kind == "commas" and n % 6 == 5:
            word += ","
        if kind == "prose" and n % 12 == 0:
            word = word.capitalize()
        out.append(" " + word)
    return out


def run(stream: list[str]) -> tuple[float, list[float]]:
    """(whole stream seconds, per-push seconds)."""
    agg = SentenceAggregator()
    per_push: list[float] = []
    started = time.perf_counter()
    for token in stream:
        t = time.perf_counter()
        agg.push(token)
        per_push.append(time.perf_counter() - t)
    agg.flush()
    return time.perf_counter() - started, per_push


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated")
    args = parser.parse_args()
    print(f"{args.tokens} tokens per stream, median of {args.repeats} runs\n")
    print("| stream | whole stream (ms) | push median (µs) | push p99 (µs) |")
    print("| --- | ---: | ---: | ---: |")
    for kind in args.kinds.split(","):
        stream = tokens(args.tokens, kind)
        totals: list[float] = []
        pushes: list[float] = []
        for _ in range(args.repeats):
            total, per_push = run(stream)
            totals.append(total)
            pushes += per_push
        pushes.sort()
        p99 = pushes[min(len(pushes) - 1, round(0.99 * (len(pushes) - 1)))]
        row = (statistics.median(totals) * 1e3, statistics.median(pushes) * 1e6, p99 * 1e6)
        print(f"| {kind} | {row[0]:.1f} | {row[1]:.1f} | {row[2]:.1f} |")


if __name__ == "__main__":
    main()
