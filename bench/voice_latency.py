"""Voice-to-voice latency at the client: end of the user's speech → first bot audio heard.

Starts a server on 127.0.0.1 (embedded models, or every model at the OpenAI-compatible
stub from the tests), connects the aiortc test client, speaks N questions (espeak-ng) and
prints median / p95 / max, with the server's own STT/LLM/TTS TTFB from RTVI metrics.

    .venv/bin/python -m bench.voice_latency --mode embedded --turns 5
    .venv/bin/python -m bench.voice_latency --mode stub --turns 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from testkit.measure import speech_seconds, stats
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess
from testkit.speech import make_speech

QUESTIONS = [
    "What is two plus two?",
    "What color is the sky?",
    "Tell me a fun fact.",
    "How are you today?",
    "What day comes after Monday?",
]
BEFORE = 0.3  # seconds of silence before each question


async def run_turns(url: str, wavs: list[tuple[Path, float]]) -> dict[str, Any]:
    client = RTCTestClient(url)
    latencies: list[float] = []
    ttfb: dict[str, list[float]] = {}
    try:
        await client.connect()
        for wav, speech_end_offset in wavs:
            stopped_before = client.types().count("bot-stopped-speaking")
            end_of_speech = client.play(str(wav)) + speech_end_offset
            deadline = time.monotonic() + 60
            while client.types().count("bot-stopped-speaking") <= stopped_before:
                if time.monotonic() > deadline:
                    raise TimeoutError("no answer within 60 s")
                await asyncio.sleep(0.05)
            first = next(
                (t for t, rms in client.audio.frames if t > end_of_speech and rms > 200), None
            )
            if first is not None:
                latencies.append(first - end_of_speech)
            await asyncio.sleep(0.5)
        for msg in client.messages:
            if msg.get("type") == "metrics" and "ttfb" in msg["data"]:
                for entry in msg["data"]["ttfb"]:
                    ttfb.setdefault(entry["processor"], []).append(entry["value"])
    finally:
        await client.close()
    return {
        "voice_to_voice": stats(latencies),
        "server_ttfb_median_ms": {
            k: round(1000 * statistics.median(v), 1) for k, v in sorted(ttfb.items())
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=["embedded", "stub"], default="embedded")
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    wavs = []
    for n in range(args.turns):
        wav = make_speech(folder, f"q{n}", QUESTIONS[n % len(QUESTIONS)], BEFORE, after=1.5)
        wavs.append((wav, speech_seconds(wav) - 1.5))
    env = {"PARLEY_LOG_LEVEL": "WARNING", "PARLEY_PRELOAD_MODELS": "true",
           "PARLEY_LLM_MAX_TOKENS": "24"}  # fmt: skip
    stub = None
    if args.mode == "stub":
        stub = OpenAIStub().start()
        stub.config.default_text = "Sure, here is a short answer."
        stub.config.transcript = "what is two plus two"
        env |= {
            "PARLEY_STT": "openai", "PARLEY_LLM": "openai", "PARLEY_TTS": "openai",
            "PARLEY_OPENAI_BASE_URL": stub.base_url, "PARLEY_OPENAI_API_KEY": stub.api_key,
        }  # fmt: skip
    server = ServerProcess(env, folder / "server.log")
    try:
        server.wait_models_ready()
        results = asyncio.run(run_turns(server.url, wavs))
    finally:
        server.stop()
        if stub is not None:
            stub.stop()
    results["mode"] = args.mode
    print(json.dumps(results, indent=2))
    row = results["voice_to_voice"]
    print("\n| mode | turns | median ms | p95 ms | max ms |\n| --- | --- | --- | --- | --- |")
    print(f"| {args.mode} | {row['n']} | {row['p50_ms']} | {row['p95_ms']} | {row['max_ms']} |")


if __name__ == "__main__":
    main()
