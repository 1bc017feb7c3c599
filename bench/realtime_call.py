"""A speech-to-speech model against the cascade, in one run: the same callers, questions
and total model time, over the plain WebSocket transport (16 kHz PCM on 127.0.0.1).

- realtime: ``PARLEY_LLM=realtime`` at the stub's realtime endpoint, its first audio
  ``--model-delay`` seconds after ``response.create`` (the local STT still runs, at
  ``--stt-delay``, for Parley's turn-taking);
- cascade: the stub's LLM (first token after ``--llm-delay``) and TTS (first audio after
  ``--tts-delay``), whose sum is the same model time by default.

Per turn: voice-to-voice at the caller (end of speech → first loud audio). The server's
CPU and RSS are sampled from /proc. Prints JSON and a Markdown table.

    .venv/bin/python -m bench.realtime_call --users 1 --turns 8
    .venv/bin/python -m bench.realtime_call --users 10 --turns 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.load import ANSWER, QUESTIONS, RMS, Utterance, utterance, wait_until
from bench.phone_call import first_loud, pcm16k
from testkit.measure import ProcSampler, log_problems, stats
from testkit.openai_stub import OpenAIStub
from testkit.socket_callers import PcmCaller
from testkit.targets import start_target

QUIET_AFTER = 0.6  # no audio for this long: the answer has ended


def quiet(caller: PcmCaller, since: float) -> bool:
    loud = [t for t, rms in caller.frames if rms > RMS]
    return bool(loud) and loud[-1] > since and time.monotonic() - loud[-1] > QUIET_AFTER


async def ask(caller: PcmCaller, speech: np.ndarray, q: Utterance) -> float:
    """One question; its voice-to-voice, once the answer has ended."""
    end = caller.say(speech) + q.end
    first = await wait_until(lambda: first_loud(caller, end), "first bot audio")
    await wait_until(lambda: quiet(caller, first), "the end of the answer")
    return first - end


async def user(url: str, index: int, args: argparse.Namespace, qs: list[Utterance]) -> Any:
    v2v: list[float] = []
    speeches = [pcm16k(q.path) for q in qs]
    await asyncio.sleep(index * args.stagger)
    try:
        async with PcmCaller(url) as caller:
            await caller.ready()
            await asyncio.sleep(1.0)
            for turn in range(args.turns):
                k = (index + turn) % len(qs)
                v2v.append(await ask(caller, speeches[k], qs[k]))
                await asyncio.sleep(0.5)
    except Exception as exc:  # one caller's failure is a result, not a crash
        return v2v, f"{type(exc).__name__}: {exc}"
    return v2v, None


def stub_for(args: argparse.Namespace) -> OpenAIStub:
    stub = OpenAIStub().start()
    config = stub.config
    config.stt_delay, config.transcript = args.stt_delay, "what is two plus two"
    config.first_token_delay, config.tts_first_audio_delay = args.llm_delay, args.tts_delay
    config.tts_seconds_per_char, config.default_text = 0.06, ANSWER
    stub.realtime.first_audio_delay, stub.realtime.default_text = args.model_delay, ANSWER
    return stub


def run(mode: str, args: argparse.Namespace, qs: list[Utterance], folder: Path) -> dict[str, Any]:
    stub = stub_for(args)
    log_path = folder / f"{mode}.log"
    env: dict[str, str] = {}
    if mode == "realtime":
        base = stub.url.replace("http://", "ws://") + "/v1"
        env = {"PARLEY_LLM": "realtime", "PARLEY_REALTIME_BASE_URL": base,
               "PARLEY_REALTIME_API_KEY": stub.api_key}  # fmt: skip
    server = sampler = None
    try:
        server = start_target("parley", args, stub, log_path, env)
        sampler = ProcSampler(server.proc.pid).start()
        url = server.url.replace("http://", "ws://") + "/ws"

        async def everyone() -> list[Any]:
            users = [user(url, i, args, qs) for i in range(args.users)]
            return list(await asyncio.wait_for(asyncio.gather(*users), args.timeout))

        results = asyncio.run(everyone())
    finally:
        if sampler is not None:
            sampler.stop()
        if server is not None:
            server.stop()
        stub.stop()
    return {
        "mode": mode, "users": args.users, "turns": args.turns,
        "voice_to_voice": stats([v for r, _ in results for v in r]),
        "server": sampler.summary(args.users) if sampler else {},
        "user_errors": [e for _, e in results if e],
        "server_log": log_problems(log_path.read_text()),
    }  # fmt: skip


def table(runs: list[dict[str, Any]]) -> str:
    out = ["| mode | users | v2v n | v2v p50 ms | v2v p95 ms | CPU %/call | RSS max MB "
           "| errors |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for r in runs:
        v, s = r["voice_to_voice"], r["server"]
        out.append(f"| {r['mode']} | {r['users']} | {v.get('n')} | {v.get('p50_ms')} "
                   f"| {v.get('p95_ms')} | {s.get('cpu_mean_pct_per_session')} "
                   f"| {s.get('rss_max_mb')} | {len(r['user_errors'])} |")  # fmt: skip
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=1)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--mode", choices=("realtime", "cascade", "both"), default="both")
    parser.add_argument("--model-delay", type=float, default=0.5, help="realtime: to audio")
    parser.add_argument("--llm-delay", type=float, default=0.3, help="cascade: to a token")
    parser.add_argument("--tts-delay", type=float, default=0.2, help="cascade: to audio")
    parser.add_argument("--stt-delay", type=float, default=0.1)
    parser.add_argument("--vad-stop-secs", type=float, default=0.2)
    parser.add_argument("--user-speech-timeout", type=float, default=0.6)
    parser.add_argument("--stagger", type=float, default=0.25)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not 1 <= args.users <= 30 or not 1 <= args.turns <= 30:
        parser.error("--users and --turns must be within 1..30")
    folder = Path(tempfile.mkdtemp(prefix="parley-realtime-"))
    qs = [utterance(folder, f"q{n}", text) for n, text in enumerate(QUESTIONS)]
    modes = ("realtime", "cascade") if args.mode == "both" else (args.mode,)
    runs = [run(mode, args, qs, folder) for mode in modes]
    print(json.dumps(runs, indent=2))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2) + "\n")
    print()
    print(table(runs))


if __name__ == "__main__":
    main()
