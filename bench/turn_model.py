"""The end-of-turn model's time: one session, and twenty sessions asking at once.

Scores real turns (the evaluation set's clips, with 0.2 s of trailing silence as at a
VAD stop) through the shared :class:`pipeline.hearing.turn_scorer.TurnScorer`, the way sessions
do, while a probe measures the event loop's lag (how late a 10 ms timer fires): the
model runs in its worker thread, so the loop should not notice it.

- ``1 session``: one clip at a time.
- ``20 sessions, staggered``: 20 sessions each pausing at random, on average every
  ``--interval`` s (a turn every few seconds per user), for ``--seconds``.
- ``20 sessions, all at once``: the worst case, 20 pauses in the same instant, repeated.

Per case: inference (features + model) and queue + inference, p50 / p95 / max, and the
loop lag p95 / max.

    .venv/bin/python -m bench.turn_model [--seconds 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.hearing.turn_scorer import Score, TurnScorer
from testkit.measure import stats
from testkit.turn_clips import COMPLETE, RATE, render


async def probe_lag(lags: list[float], stop: asyncio.Event, period: float = 0.01) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(period)
        lags.append(time.perf_counter() - started - period)


async def measure(scorer: TurnScorer, case: Any) -> dict[str, Any]:
    lags: list[float] = []
    stop = asyncio.Event()
    probe = asyncio.create_task(probe_lag(lags, stop))
    scores: list[Score] = await case()
    stop.set()
    await probe
    return {
        "clips": len(scores),
        "inference": stats([s.inference for s in scores]),
        "queue_plus_inference": stats([s.queued + s.inference for s in scores]),
        "loop_lag": stats(lags),
        "mean_probability": round(statistics.fmean(s.probability for s in scores), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=3.0, help="mean s between pauses")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    silence = np.zeros(round(0.2 * RATE), np.int16)
    clips = [
        np.concatenate([render(t, v), silence]) for t in COMPLETE for v in ("hibari", "espeak")
    ]
    scorer = TurnScorer()
    rng = random.Random(1)

    async def one_session() -> list[Score]:
        return [await scorer.score(clip) for clip in clips]

    async def staggered() -> list[Score]:
        out: list[Score] = []
        end = time.monotonic() + args.seconds

        async def session(n: int) -> None:
            await asyncio.sleep(rng.uniform(0, args.interval))
            while time.monotonic() < end:
                out.append(await scorer.score(clips[rng.randrange(len(clips))]))
                await asyncio.sleep(rng.expovariate(1 / args.interval))

        await asyncio.gather(*(session(n) for n in range(args.sessions)))
        return out

    async def at_once() -> list[Score]:
        out: list[Score] = []
        for _ in range(5):
            batch = [clips[rng.randrange(len(clips))] for _ in range(args.sessions)]
            out += await asyncio.gather(*(scorer.score(c) for c in batch))
            await asyncio.sleep(0.5)
        return out

    async def run() -> dict[str, Any]:
        return {
            "1 session": await measure(scorer, one_session),
            f"{args.sessions} sessions, staggered": await measure(scorer, staggered),
            f"{args.sessions} sessions, all at once": await measure(scorer, at_once),
        }

    report = asyncio.run(run())
    scorer.shutdown()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=1))
    print("\n| case | clips | inference p50 / p95 ms | queue + inference p50 / p95 / max ms "
          "| loop lag p95 / max ms |\n| --- | ---: | --- | --- | --- |")  # fmt: skip
    for case, r in report.items():
        inf, total, lag = r["inference"], r["queue_plus_inference"], r["loop_lag"]
        print(f"| {case} | {r['clips']} | {inf['p50_ms']} / {inf['p95_ms']} | "
              f"{total['p50_ms']} / {total['p95_ms']} / {total['max_ms']} | "
              f"{lag['p95_ms']} / {lag['max_ms']} |")  # fmt: skip


if __name__ == "__main__":
    main()
