"""What recording a call costs (``PARLEY_RECORDING``): CPU per call and storage per minute.

Two parts, both printed as JSON and a Markdown table:

- ``encode``: :class:`server.storage.recording.CallRecording` alone, in this process, fed
  a talking call's 20 ms frames as fast as it takes them (the caller's generated speech
  a quarter of the time, the bot's stub voice at 48 kHz half of it, silence between, on
  a clock advanced frame by frame): CPU seconds per minute of call (the loop's hand-over
  and the worker's placing, resampling and encoding; as % of one core at real time) and
  bytes per minute. Repeated ``--repeats`` times; median and spread.
- ``calls``: the server, with ``--calls`` callers over the plain WebSocket (``/ws``) for
  ``--seconds`` each, asking a question every 8 s (the stub answers, ~4 s of speech),
  recording off and on, alternated ``--rounds`` times: the server's CPU per call from
  /proc (the difference on - off is what recording adds, within the machine's noise)
  and the recordings' bytes per minute.

    .venv/bin/python -m bench.recording --part encode
    .venv/bin/python -m bench.recording --part calls --calls 4 --seconds 40 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import av
import numpy as np
from loguru import logger

from server.storage.recording import CallRecording
from testkit.measure import ProcSampler
from testkit.openai_stub import OpenAIStub
from testkit.server_process import ServerProcess
from testkit.socket_callers import PcmCaller
from testkit.speech import espeak

QUESTION = "When does the pharmacy open on Saturdays?"
WORKER_LINE = re.compile(r"call recording \S+: ([\d.]+) s, ([\d.]+) s of CPU in its worker")
ANSWER = "The pharmacy opens at nine in the morning and closes at six in the evening."


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def bot_voice(seconds: float) -> np.ndarray:
    """A voice-like buzz at 48 kHz, as the stub's TTS (a pulse train rising and falling)."""
    t = np.arange(round(48000 * seconds)) / 48000
    phase = np.cumsum(2 * np.pi * 140 * (1 + 0.1 * np.sin(2 * np.pi * 0.7 * t)) / 48000)
    buzz = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4 * t)
    return (buzz * envelope * 4000).astype(np.int16)


def one_encode(minutes: float, folder: Path) -> dict[str, float]:
    """A talking call of ``minutes`` through a recording; its CPU and size per minute."""
    speech = espeak(QUESTION).astype(np.int16)
    bot = bot_voice(4.0)
    clock = Clock()
    frames = round(minutes * 60 / 0.02)
    # Fed faster than real time: a queue that holds the whole call (the clock is the
    # call's, so every frame still lands where it belongs).
    recording = CallRecording(folder / "call.ogg", clock=clock, max_queue=2 * frames + 10)
    cycle = 8.0  # s: the caller asks (~2 s), the bot answers (4 s), silence
    quiet_user, quiet_bot = bytes(640), bytes(1920)
    cpu = time.process_time()
    for n in range(frames):
        t = n * 0.02
        in_cycle = t % cycle
        clock.now = t + 0.02
        u = round(in_cycle * 16000)
        recording.user(
            speech[u : u + 320].tobytes().ljust(640, b"\0") if u < len(speech) else quiet_user
        )
        b = round((in_cycle - 3.0) * 48000)
        recording.bot(bot[b : b + 960].tobytes() if 0 <= b < len(bot) - 960 else quiet_bot)
    asyncio.run(recording.close())
    used = time.process_time() - cpu
    size = (folder / "call.ogg").stat().st_size
    with av.open(str(folder / "call.ogg")) as container:
        decoded = sum(f.samples for f in container.decode(audio=0)) / 48000
    return {
        "cpu_s_per_min": used / minutes,
        "pct_of_core": 100 * used / (minutes * 60),
        "bytes_per_min": size / (decoded / 60),
        "decoded_s": decoded,
        "dropped": recording.dropped,
    }


def encode_part(args: argparse.Namespace) -> dict[str, Any]:
    logger.disable("server.storage.recording")  # its line per call: the figures are here
    runs = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(one_encode(args.minutes, Path(tmp)))
    keys = ("cpu_s_per_min", "pct_of_core", "bytes_per_min")
    return {
        "minutes": args.minutes,
        "runs": len(runs),
        **{f"{k}_median": round(statistics.median(r[k] for r in runs), 3) for k in keys},
        **{f"{k}_max": round(max(r[k] for r in runs), 3) for k in keys},
        "dropped": sum(r["dropped"] for r in runs),
    }


async def caller(url: str, seconds: float, question: np.ndarray) -> None:
    async with PcmCaller(url) as call:
        await call.ready()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await asyncio.sleep(1.0)
            call.say(question)
            await asyncio.sleep(7.0)


def calls_round(
    args: argparse.Namespace, stub: OpenAIStub, record: bool, tmp: Path
) -> dict[str, Any]:
    folder = tmp / f"rec-{time.monotonic_ns()}"
    env = {f"PARLEY_{k.upper()}": v for k, v in stub.server_settings(greeting="").items()}
    env |= {"PARLEY_LOG_LEVEL": "INFO", "PARLEY_RECORDING": str(record).lower(),
            "PARLEY_RECORDING_DIR": str(folder)}  # fmt: skip
    log = tmp / f"server-{time.monotonic_ns()}.log"
    server = ServerProcess(env, log)
    try:
        question = espeak(QUESTION)
        url = server.url.replace("http://", "ws://") + "/ws"

        async def run() -> None:
            await asyncio.gather(*(caller(url, args.seconds, question) for _ in range(args.calls)))

        # The first seconds (connecting, loading the VAD) are left out of the sample.
        sampler = ProcSampler(server.proc.pid, period=1.0)
        loop = asyncio.new_event_loop()
        task = loop.create_task(run())
        loop.run_until_complete(asyncio.sleep(3.0))
        sampler.start()
        loop.run_until_complete(task)
        sampler.stop()
        loop.close()
        time.sleep(1.0)  # the recordings' last pages
    finally:
        server.stop()
    files = list(folder.glob("*.ogg")) if folder.exists() else []
    seconds = 0.0
    for path in files:
        with av.open(str(path)) as container:
            seconds += sum(f.samples for f in container.decode(audio=0)) / 48000
    size = sum(p.stat().st_size for p in files)
    cpu = statistics.fmean(sampler.cpu) if sampler.cpu else 0.0
    # Each recording's worker logs its own CPU (time.thread_time) as it finishes.
    workers = [tuple(map(float, m)) for m in WORKER_LINE.findall(log.read_text())]
    return {
        "recording": record,
        "cpu_pct": round(cpu, 2),
        "cpu_pct_per_call": round(cpu / args.calls, 2),
        "files": len(files),
        "bytes_per_min": round(size / (seconds / 60)) if seconds else None,
        "worker_pct_of_core": (
            round(100 * sum(c for _, c in workers) / sum(s for s, _ in workers), 3)
            if workers
            else None
        ),
    }


def calls_part(args: argparse.Namespace) -> dict[str, Any]:
    rounds = []
    with OpenAIStub() as stub, tempfile.TemporaryDirectory() as tmp:
        stub.config.default_text = ANSWER
        stub.config.transcript = QUESTION
        stub.config.tts_seconds_per_char = 0.05
        for _ in range(args.rounds):
            for record in (False, True):
                rounds.append(calls_round(args, stub, record, Path(tmp)))
                print(json.dumps(rounds[-1]), flush=True)
    off = [r["cpu_pct_per_call"] for r in rounds if not r["recording"]]
    on = [r["cpu_pct_per_call"] for r in rounds if r["recording"]]
    return {
        "calls": args.calls,
        "seconds": args.seconds,
        "rounds": rounds,
        "cpu_pct_per_call_off": round(statistics.median(off), 2),
        "cpu_pct_per_call_on": round(statistics.median(on), 2),
        "added_pct_per_call": round(statistics.median(on) - statistics.median(off), 2),
        "worker_pct_of_core": round(
            statistics.median(
                r["worker_pct_of_core"] for r in rounds if r["worker_pct_of_core"] is not None
            ),
            3,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("encode", "calls", "both"), default="both")
    parser.add_argument("--minutes", type=float, default=2.0, help="encode: call length")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    if args.part in ("encode", "both"):
        out["encode"] = encode_part(args)
        e = out["encode"]
        print("| part | CPU s per min of call | % of a core | bytes per min |")
        print("| --- | ---: | ---: | ---: |")
        print(f"| encode (median of {e['runs']}) | {e['cpu_s_per_min_median']} "
              f"| {e['pct_of_core_median']} | {e['bytes_per_min_median']:.0f} |")  # fmt: skip
    if args.part in ("calls", "both"):
        out["calls"] = calls_part(args)
        c = out["calls"]
        print("| calls | CPU %/call off | CPU %/call on | added | the worker's, % of a core |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        off, on = c["cpu_pct_per_call_off"], c["cpu_pct_per_call_on"]
        added, worker = c["added_pct_per_call"], c["worker_pct_of_core"]
        print(f"| {c['calls']} | {off} | {on} | {added} | {worker} |")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
