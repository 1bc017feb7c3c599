"""VAD cost per 32 ms window: one session, and many sessions batched into one call per tick.

Feeds 20 ms frames of espeak-ng speech with pauses (so the state machine does real work)
and prints a Markdown table of medians and p95s. Costs include feeding the frames: a
window's cost is the tick that analysed it plus its share of the feed-only ticks. Cases
run interleaved in rounds (the box is shared and its speed drifts); each is bounded by
``--windows`` windows and ``--seconds`` seconds in all, so the run stays under ~30 s.

    .venv/bin/python -m bench.vad [--variants]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from pipeline.hearing.silero import (
    CONTEXT,
    SAMPLE_RATE,
    STATE_SIZE,
    WINDOW,
    SileroModel,
    find_silero_model,
)
from pipeline.hearing.vad import VADAnalyzer
from pipeline.hearing.vad_batcher import VADBatch
from testkit.speech import SENTENCE_A, SENTENCE_B, espeak, timeline

FRAME = 320
VARIANTS = ("silero_vad.onnx", "silero_vad_16k_op15.onnx", "silero_vad_op18_ifless.onnx")


def audio() -> list[bytes]:
    """About 10 s of speech and silence as 20 ms frames."""
    samples = timeline(0.8, espeak(SENTENCE_A), 1.2, espeak(SENTENCE_B), 1.5).samples
    usable = samples.size - samples.size % FRAME
    return [samples[i : i + FRAME].tobytes() for i in range(0, usable, FRAME)]


def stats(per_window: list[float]) -> tuple[int, float, float]:
    ordered = sorted(per_window)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return len(ordered), statistics.median(ordered) * 1e6, p95 * 1e6


def per_window(
    tick: Callable[[int], bool], sessions: int, windows: int, seconds: float
) -> list[float]:
    """Time ``tick(i)`` (feed one frame to every session and analyse; True if it ran a
    window per session). A window costs its tick plus its share of the feed-only ticks,
    divided by the sessions it served."""
    with_window: list[float] = []
    feed_only = 0.0
    deadline = time.perf_counter() + seconds
    i = 0
    while len(with_window) < windows and time.perf_counter() < deadline:
        start = time.perf_counter()
        ran = tick(i)
        elapsed = time.perf_counter() - start
        if ran:
            with_window.append(elapsed)
        else:
            feed_only += elapsed
        i += 1
    share = feed_only / max(len(with_window), 1)
    return [(t + share) / sessions for t in with_window]


def sessions_audio(frames: list[bytes], sessions: int) -> list[int]:
    return [(n * 37) % len(frames) for n in range(sessions)]  # each session its own audio


def single(model: SileroModel, frames: list[bytes], windows: int, seconds: float) -> list[float]:
    """One session, push() per frame (inference inline, a batch of one)."""
    analyzer = VADAnalyzer(model=model)

    def tick(i: int) -> bool:
        ran = analyzer.buffered + FRAME >= WINDOW
        analyzer.push(frames[i % len(frames)], i * 0.02)
        return ran

    return per_window(tick, 1, windows, seconds)


def batched(
    model: SileroModel, frames: list[bytes], sessions: int, windows: int, seconds: float
) -> list[float]:
    """Per tick: feed every session a frame, then one VADBatch.run for all of them."""
    analyzers = [VADAnalyzer(model=model) for _ in range(sessions)]
    offsets = sessions_audio(frames, sessions)
    batch = VADBatch(model)

    def tick(i: int) -> bool:
        ran = analyzers[0].buffered + FRAME >= WINDOW  # all sessions are in phase
        for analyzer, offset in zip(analyzers, offsets, strict=True):
            analyzer.feed(frames[(i + offset) % len(frames)], i * 0.02)
        batch.run(analyzers)
        return ran

    return per_window(tick, sessions, windows, seconds)


def unbatched(
    model: SileroModel, frames: list[bytes], sessions: int, windows: int, seconds: float
) -> list[float]:
    """The same load with one inference per session (push() each): what batching saves."""
    analyzers = [VADAnalyzer(model=model) for _ in range(sessions)]
    offsets = sessions_audio(frames, sessions)

    def tick(i: int) -> bool:
        ran = analyzers[0].buffered + FRAME >= WINDOW
        for analyzer, offset in zip(analyzers, offsets, strict=True):
            analyzer.push(frames[(i + offset) % len(frames)], i * 0.02)
        return ran

    return per_window(tick, sessions, windows, seconds)


def infer_only(model: SileroModel, batch: int, calls: int) -> list[float]:
    rng = np.random.default_rng(0)
    windows = (rng.standard_normal((batch, CONTEXT + WINDOW)) * 0.05).astype(np.float32)
    state = np.zeros((2, batch, STATE_SIZE), np.float32)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        model.infer(windows, state)
        times.append((time.perf_counter() - start) / batch)
    return times


def variants(frames: list[bytes]) -> None:
    """Speed and agreement of the model files silero-vad ships."""
    folder = find_silero_model().parent
    models = {name: SileroModel(folder / name) for name in VARIANTS}
    pcm = np.frombuffer(b"".join(frames), np.int16).astype(np.float32) / 32768
    count = pcm.size // WINDOW
    probs: dict[str, np.ndarray] = {}
    for name, model in models.items():
        state = np.zeros((2, 1, STATE_SIZE), np.float32)
        window = np.zeros((1, CONTEXT + WINDOW), np.float32)
        out = np.empty(count, np.float32)
        for i in range(count):
            window[0, :CONTEXT] = window[0, -CONTEXT:]
            window[0, CONTEXT:] = pcm[i * WINDOW : (i + 1) * WINDOW]
            prob, state = model.infer(window, state)
            out[i] = prob[0]
        probs[name] = out
    timings: dict[tuple[str, int], list[float]] = {(n, b): [] for n in VARIANTS for b in (1, 50)}
    for _ in range(5):  # interleaved rounds, so drift on a shared box hits all alike
        for name, model in models.items():
            timings[(name, 1)] += infer_only(model, 1, 300)
            timings[(name, 50)] += infer_only(model, 50, 20)
    print("\n| model file | µs/window batch 1 (median / p95) | batch 50 | max Δprob |")
    print("| --- | --- | --- | --- |")
    for name in VARIANTS:
        one, fifty = stats(timings[(name, 1)]), stats(timings[(name, 50)])
        diff = float(np.abs(probs[name] - probs[VARIANTS[0]]).max())
        print(
            f"| {name} | {one[1]:.0f} / {one[2]:.0f} | {fifty[1]:.0f} / {fifty[2]:.0f} "
            f"| {diff:.1e} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--windows", type=int, default=3000, help="windows per case, at most")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per case, at most")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds")
    parser.add_argument("--variants", action="store_true", help="also compare model files")
    args = parser.parse_args()
    model = SileroModel.shared()
    frames = audio()
    Measure = Callable[[int, float], list[float]]
    cases: list[tuple[str, int, Measure]] = [
        ("model.infer only", 1, lambda n, s: infer_only(model, 1, n)),
        ("push() per frame", 1, lambda n, s: single(model, frames, n, s)),
        *[(f"VADBatch.run, {k} per call", k, lambda n, s, k=k: batched(model, frames, k, n, s))
          for k in (1, 10, 50)],
        *[(f"push() each, {k} calls", k, lambda n, s, k=k: unbatched(model, frames, k, n, s))
          for k in (10, 50)],
    ]  # fmt: skip
    for _, _, measure in cases:
        measure(50, 0.2)  # warm-up: caches, scratch buffers, onnxruntime arenas
    samples: list[list[float]] = [[] for _ in cases]
    for _ in range(args.rounds):
        for pooled, (_, _, measure) in zip(samples, cases, strict=True):
            pooled += measure(args.windows // args.rounds, args.seconds / args.rounds)
    print(f"Silero VAD, {WINDOW} samples ({WINDOW * 1000 // SAMPLE_RATE} ms) per window\n")
    print("| case | sessions | windows | µs per session-window, median | p95 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for (label, sessions, _), pooled in zip(cases, samples, strict=True):
        count, median, p95 = stats(pooled)
        print(f"| {label} | {sessions} | {count} | {median:.0f} | {p95:.0f} |")
    if args.variants:
        variants(frames)


if __name__ == "__main__":
    main()
