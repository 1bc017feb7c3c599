"""Event-loop lag and CPU with N sessions talking at once: what the VAD costs the loop.

Builds N real :class:`server.session.voice.VoiceSession` objects (the server's per-call pipeline:
echo canceller, Silero VAD, transcriber, end-of-turn buffer, turn logic, RTVI events)
in this process, with the providers at the OpenAI-compatible stub, and feeds each one
espeak-ng speech in 20 ms frames on a real-time schedule, as the WebRTC transport calls
``push_audio``. Sessions are spread over the 20 ms (as packets from many peers arrive;
``--aligned``: all in the same loop iteration, as after a stall) and loop their speech,
with pauses shorter than the VAD stop window (``--vad-stop-secs``), so every session
stays SPEAKING and every one of its 32 ms windows needs the model: the worst case for
the VAD. A probe measures how late a 5 ms timer fires (the loop's lag); process CPU is
``time.process_time`` over the wall time (% of one core); the VAD's decision delay is
from the feed of the frame that completed a window to its result being applied.
``--inline`` scores each window on the loop, as before :mod:`pipeline.hearing.vad_batcher`.

Only WebRTC (RTP, Opus decode) is left out, so the figures isolate the pipeline; the
same shapes over WebRTC show in ``bench.load``'s event-loop lag line.

    .venv/bin/python -m bench.vad_loop [--sessions 20] [--seconds 20] [--aligned] [--inline]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.events import Event
from pipeline.hearing.silero import WINDOW, SileroModel
from pipeline.hearing.vad import VADAnalyzer
from server.media.outbound_track import PacedAudioTrack
from server.session.model_services import build_services
from server.session.voice import VoiceSession
from server.settings import Settings
from testkit.openai_stub import OpenAIStub
from testkit.speech import SENTENCE_A, SENTENCE_B, espeak, timeline

FRAME = 320  # samples: 20 ms at 16 kHz
FRAME_SECONDS = 0.02
PROBE_SECONDS = 0.005


class CountingModel(SileroModel):
    """The real model, counting calls, windows, and calls made on the event loop's thread."""

    def __init__(self) -> None:
        self.calls = self.windows = self.on_loop = 0
        self.loop_thread: int | None = None
        super().__init__()

    def infer(self, windows: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.calls += 1
        self.windows += windows.shape[0]
        self.on_loop += threading.get_ident() == self.loop_thread
        return super().infer(windows, state)


class WindowTimer:
    """Times each inferred window from the feed of the frame that completed it to its
    result being applied (the VAD decision's delay), by wrapping one analyzer's methods."""

    def __init__(self, vad: VADAnalyzer, delays: list[float]) -> None:
        self._vad, self._delays, self._ready_at = vad, delays, None
        feed, take, apply = vad.feed, vad.take_window, vad.apply

        def timed_feed(frame: bytes, t: float) -> None:
            feed(frame, t)
            if self._ready_at is None and vad.buffered >= WINDOW:
                self._ready_at = time.perf_counter()

        def timed_take() -> np.ndarray | None:
            window = take()
            if window is None and vad.buffered < WINDOW:
                self._ready_at = None  # quiet windows consumed without the model
            return window

        def timed_apply(prob: float, state: np.ndarray) -> list[Event]:
            events = apply(prob, state)
            if self._ready_at is not None:
                self._delays.append(time.perf_counter() - self._ready_at)
            self._ready_at = time.perf_counter() if vad.buffered >= WINDOW else None
            return events

        vad.feed, vad.take_window, vad.apply = timed_feed, timed_take, timed_apply  # type: ignore[method-assign]


def speech_frames() -> list[bytes]:
    """Two sentences with short pauses (0.3 s, under the stop window), as 20 ms frames."""
    samples = timeline(0.3, espeak(SENTENCE_A), 0.3, espeak(SENTENCE_B)).samples
    usable = samples.size - samples.size % FRAME
    return [samples[i : i + FRAME].tobytes() for i in range(0, usable, FRAME)]


def quantiles(values: list[float]) -> dict[str, float]:
    """n, p50, p99, max in ms."""
    ordered = sorted(values)
    if not ordered:
        return {"n": 0}

    def at(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 2)

    return {"n": len(ordered), "p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": at(1.0)}


async def talk(
    session: VoiceSession, frames: list[bytes], offset: int, until: float, aligned: bool
) -> int:
    """Push 20 ms frames on an absolute schedule (late frames are pushed at once, as a
    jitter buffer releases them); returns frames pushed. Peers are spread over the 20 ms
    (7 ms apart, modulo 20) unless ``aligned``."""
    if not aligned:
        await asyncio.sleep(offset * 0.007 % FRAME_SECONDS)
    start = time.monotonic()
    n = 0
    while time.monotonic() < until:
        session.push_audio(frames[(n + offset * 13) % len(frames)])
        n += 1
        await asyncio.sleep(max(0.0, start + n * FRAME_SECONDS - time.monotonic()))
    return n


async def probe(lags: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(PROBE_SECONDS)
        lags.append(max(0.0, time.perf_counter() - started - PROBE_SECONDS))


async def run(args: argparse.Namespace, settings: Settings, frames: list[bytes]) -> dict[str, Any]:
    services = build_services(settings)
    model = services.vad = CountingModel()
    model.loop_thread = threading.get_ident()
    sessions = [
        VoiceSession(services, settings, PacedAudioTrack(), lambda _: None)
        for _ in range(args.sessions)
    ]
    delays: list[float] = []
    for session in sessions:
        WindowTimer(session.vad, delays)
        session.start()
        if args.inline:  # the old path, for comparison: Silero on the loop, a batch of one
            session._vad_batcher.unregister(session.vad)  # type: ignore[union-attr]
            session._vad_batcher = None
    try:
        begin = time.monotonic()
        until = begin + args.warmup + args.seconds
        feeders = [
            asyncio.create_task(talk(s, frames, n, until, args.aligned))
            for n, s in enumerate(sessions)
        ]
        await asyncio.sleep(args.warmup)  # the VADs reach SPEAKING; arenas warm up
        lags: list[float] = []
        stop = asyncio.Event()
        prober = asyncio.create_task(probe(lags, stop))
        delays.clear()
        cpu0, wall0 = time.process_time(), time.monotonic()
        calls0, windows0, on_loop0 = model.calls, model.windows, model.on_loop
        pushed = await asyncio.gather(*feeders)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        stop.set()
        await prober
        calls, windows = model.calls - calls0, model.windows - windows0
        on_loop = model.on_loop - on_loop0
        speaking = sum(1 for s in sessions if s.vad.state.name == "SPEAKING")
    finally:
        for session in sessions:
            await session.close()
        await services.aclose()
    return {
        "sessions": args.sessions,
        "vad": "inline" if args.inline else "batched",
        "phases": "aligned" if args.aligned else "spread",
        "seconds": round(wall, 1),
        "frames_pushed": sum(pushed),
        "speaking_at_end": speaking,
        "loop_lag": quantiles(lags),
        "vad_decision_delay": quantiles(delays),
        "inferences_per_s": round(calls / wall, 1),
        "windows_per_s": round(windows / wall, 1),
        "mean_batch": round(windows / calls, 2) if calls else 0,
        "inferences_on_loop_thread": on_loop,
        "cpu_pct_of_core": round(100 * cpu / wall, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured, after warm-up")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--vad-stop-secs", type=float, default=1.0,
                        help="over the speech's pauses: sessions never stop talking")  # fmt: skip
    parser.add_argument("--inline", action="store_true",
                        help="score inline on the loop (the path before VADBatcher)")  # fmt: skip
    parser.add_argument("--aligned", action="store_true",
                        help="all sessions' frames in the same loop iteration")  # fmt: skip
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not 1 <= args.sessions <= 100 or not 1 <= args.seconds <= 120:
        parser.error("--sessions must be within 1..100 and --seconds within 1..120")
    frames = speech_frames()
    with OpenAIStub() as stub:
        settings = Settings(
            stt="openai", llm="openai", tts="openai", greeting="",
            openai_base_url=stub.base_url, openai_api_key=stub.api_key,
            vad_stop_secs=args.vad_stop_secs,
        )  # fmt: skip
        report = asyncio.run(run(args, settings, frames))
    print(json.dumps(report, indent=1))
    lag, delay = report["loop_lag"], report["vad_decision_delay"]
    print(f"\n| sessions | loop lag p50 ms | p99 ms | max ms | CPU % of a core | windows/s "
          f"| mean batch | on loop | VAD delay p50 / p99 ms | load 1m |\n"
          f"| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
          f"| {report['sessions']} | {lag['p50_ms']} | {lag['p99_ms']} | {lag['max_ms']} "
          f"| {report['cpu_pct_of_core']} | {report['windows_per_s']} | {report['mean_batch']} "
          f"| {report['inferences_on_loop_thread']} | {delay['p50_ms']} / {delay['p99_ms']} "
          f"| {report['load_average_1m']} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
