"""Phone calls against WebRTC calls, in one run: the same users, turns, stub delays and
questions, over Twilio Media Streams (a fake Twilio per user, μ-law at 8 kHz over a
WebSocket on 127.0.0.1) and over WebRTC (bench/load.py's aiortc users).

Per phone turn: voice-to-voice at the caller (end of speech → first loud audio message),
barge-in as onset → ``clear`` received (the provider is told to drop its buffer) and
onset → the last audio message before the bot went quiet. The server's CPU and RSS are
sampled from /proc. Prints JSON and a Markdown table.

    .venv/bin/python -m bench.phone_call --users 1 --turns 6 --barge-in-every 3
    .venv/bin/python -m bench.phone_call --users 20 --turns 3 --transport phone
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.load import (
    ANSWER,
    BARGE,
    QUESTIONS,
    RMS,
    Utterance,
    run_target,
    utterance,
    wait_until,
)
from pipeline.audio.resampling import resample
from testkit.measure import ProcSampler, log_problems, stats
from testkit.socket_callers import TwilioCaller
from testkit.targets import start_stub, start_target

QUIET_AFTER = 0.6  # no audio for this long: the bot has finished its answer


@dataclass
class PhoneResult:
    voice_to_voice: list[float] = field(default_factory=list)
    clear_after_onset: list[float] = field(default_factory=list)
    quiet_after_onset: list[float] = field(default_factory=list)
    barge_missed: int = 0
    error: str | None = None


def pcm16k(path: Path) -> np.ndarray:
    with wave.open(str(path)) as src:
        samples = np.frombuffer(src.readframes(src.getnframes()), np.int16)
        return resample(samples, src.getframerate(), 16000)


def first_loud(caller: TwilioCaller, since: float) -> float | None:
    return next((t for t, rms in caller.frames if t > since and rms > RMS), None)


def quiet(caller: TwilioCaller, since: float) -> bool:
    """Audio came after ``since`` and none for QUIET_AFTER seconds."""
    last = caller.frames[-1][0] if caller.frames else 0.0
    return last > since and time.monotonic() - last > QUIET_AFTER


def clear_after(caller: TwilioCaller, since: float) -> float | None:
    return next((t for t, m in caller.events if t > since and m.get("event") == "clear"), None)


async def phone_turn(caller: TwilioCaller, q: Utterance, speech: np.ndarray,
                     result: PhoneResult) -> None:  # fmt: skip
    end = caller.say(speech) + q.end
    first = await wait_until(lambda: first_loud(caller, end), "first bot audio")
    result.voice_to_voice.append(first - end)
    await wait_until(lambda: quiet(caller, first), "the end of the answer")


async def phone_barge(caller: TwilioCaller, q: Utterance, speech: np.ndarray,
                      barge: Utterance, barge_speech: np.ndarray, delay: float,
                      result: PhoneResult) -> None:  # fmt: skip
    end = caller.say(speech) + q.end
    first = await wait_until(lambda: first_loud(caller, end), "first bot audio")
    result.voice_to_voice.append(first - end)
    await asyncio.sleep(delay)
    onset = caller.say(barge_speech) + barge.onset
    await asyncio.sleep(max(0.0, onset - time.monotonic()))
    if quiet(caller, first):
        result.barge_missed += 1
    else:
        cleared = await wait_until(lambda: clear_after(caller, onset), "clear", 10)
        result.clear_after_onset.append(cleared - onset)
        await wait_until(lambda: time.monotonic() - caller.frames[-1][0] > 0.3, "silence", 10)
        last = max((t for t, _ in caller.frames if t <= cleared + 0.3), default=onset)
        result.quiet_after_onset.append(max(0.0, last - onset))
    await wait_until(lambda: quiet(caller, onset + barge.end), "answer to the barge-in")


async def phone_user(url: str, index: int, args: argparse.Namespace, qs: list[Utterance],
                     barge: Utterance) -> PhoneResult:  # fmt: skip
    result = PhoneResult()
    await asyncio.sleep(index * args.stagger)
    speeches = [pcm16k(q.path) for q in qs]
    barge_speech = pcm16k(barge.path)
    try:
        async with TwilioCaller(url) as caller:
            await asyncio.sleep(0.5)
            for turn in range(args.turns):
                k = (index + turn) % len(qs)
                if args.barge_in_every and (turn + 1) % args.barge_in_every == 0:
                    await phone_barge(caller, qs[k], speeches[k], barge, barge_speech,
                                      args.barge_in_delay, result)  # fmt: skip
                else:
                    await phone_turn(caller, qs[k], speeches[k], result)
                await asyncio.sleep(0.5)
    except Exception as exc:  # one caller's failure is a result, not a crash
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def run_phone(args: argparse.Namespace, qs: list[Utterance], barge: Utterance,
              folder: Path) -> dict[str, Any]:  # fmt: skip
    log_path = folder / "phone.log"
    stub = start_stub(args, ANSWER, "what is two plus two", process=True)
    server = sampler = None
    try:
        server = start_target("parley", args, stub, log_path)
        sampler = ProcSampler(server.proc.pid).start()
        url = server.url.replace("http://", "ws://") + "/telephony/ws"
        started = time.monotonic()

        async def everyone() -> list[PhoneResult]:
            users = [phone_user(url, i, args, qs, barge) for i in range(args.users)]
            return list(await asyncio.wait_for(asyncio.gather(*users), args.timeout))

        results = asyncio.run(everyone())
        run_seconds = time.monotonic() - started
    finally:
        if sampler is not None:
            sampler.stop()
        if server is not None:
            server.stop()
        stub.stop()
    return {
        "target": "phone", "users": args.users, "turns": args.turns,
        "run_seconds": round(run_seconds, 1),
        "voice_to_voice": stats([v for r in results for v in r.voice_to_voice]),
        "barge_in_clear": stats([v for r in results for v in r.clear_after_onset]),
        "barge_in": stats([v for r in results for v in r.quiet_after_onset]),
        "barge_in_missed": sum(r.barge_missed for r in results),
        "server": sampler.summary(args.users) if sampler else {},
        "user_errors": [r.error for r in results if r.error],
        "server_log": log_problems(log_path.read_text()),
    }  # fmt: skip


def table(runs: list[dict[str, Any]]) -> str:
    out = ["| transport | users | v2v n | v2v p50 ms | v2v p95 ms | barge-in p50 ms "
           "| clear p50 ms | CPU %/call | RSS max MB | errors |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for run in runs:
        v, b = run["voice_to_voice"], run["barge_in"]
        clear = run.get("barge_in_clear", {}).get("p50_ms", "-")
        s = run["server"]
        out.append(f"| {run['target']} | {run['users']} | {v.get('n')} | {v.get('p50_ms')} "
                   f"| {v.get('p95_ms')} | {b.get('p50_ms', '-')} | {clear} "
                   f"| {s.get('cpu_mean_pct_per_session')} | {s.get('rss_max_mb')} "
                   f"| {len(run['user_errors'])} |")  # fmt: skip
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=1)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--barge-in-every", type=int, default=3, help="0 = never")
    parser.add_argument("--barge-in-delay", type=float, default=0.5)
    parser.add_argument("--transport", choices=("phone", "webrtc", "both"), default="both")
    parser.add_argument("--stt-delay", type=float, default=0.1)
    parser.add_argument("--llm-delay", type=float, default=0.2)
    parser.add_argument("--tts-delay", type=float, default=0.1)
    parser.add_argument("--tts-seconds-per-char", type=float, default=0.06)
    parser.add_argument("--vad-stop-secs", type=float, default=0.2)
    parser.add_argument("--user-speech-timeout", type=float, default=0.6)
    parser.add_argument("--stagger", type=float, default=0.25)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not 1 <= args.users <= 50 or not 1 <= args.turns <= 50:
        parser.error("--users and --turns must be within 1..50")
    # What bench/load.py's WebRTC run reads besides the above.
    args.client_jitter_frames, args.stub_thread, args.profile, args.log = 1, False, None, None
    folder = Path(tempfile.mkdtemp(prefix="parley-phone-"))
    qs = [utterance(folder, f"q{n}", text) for n, text in enumerate(QUESTIONS)]
    barge = utterance(folder, "barge", BARGE)
    runs = []
    if args.transport in ("webrtc", "both"):
        webrtc = run_target("parley", args, qs, barge, folder)
        webrtc["target"] = "webrtc"
        runs.append(webrtc)
    if args.transport in ("phone", "both"):
        runs.append(run_phone(args, qs, barge, folder))
    print(json.dumps(runs, indent=2))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2) + "\n")
    print()
    print(table(runs))


if __name__ == "__main__":
    main()
