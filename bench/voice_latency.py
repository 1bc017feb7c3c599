"""Voice-to-voice latency at the client: end of the user's speech → first bot audio heard.

Starts a server on 127.0.0.1 (embedded models, or every model at the OpenAI-compatible
stub from the tests), connects the aiortc test client, lets the greeting play (the
default greeting, as `make run` speaks it), then speaks complete questions and prints
median / p95 / max, the first turn after start on its own, the server's STT/LLM/TTS TTFB
from RTVI metrics, what the bot heard and said, and the server's RSS.

The questions are a held-out set (never used to tune anything), in two voices:
``espeak`` (espeak-ng en-us) and ``hibari`` (the embedded neural voice, a different
speaker from any test). ``--env KEY=VALUE`` passes settings (e.g. the embedded LLM).

    .venv/bin/python -m bench.voice_latency --mode embedded --turns 10 --voice espeak hibari
    .venv/bin/python -m bench.voice_latency --mode stub --turns 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import wave
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from testkit.measure import stats
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess
from testkit.voices import render

QUESTIONS = [
    "What is two plus two?",
    "How many legs does a spider have?",
    "What is the capital of Spain?",
    "Can you tell me a fun fact about octopuses?",
    "What should I cook for dinner tonight?",
    "Who wrote the play Hamlet?",
    "How far away is the moon?",
    "What day comes after Monday?",
    "Why is the sky blue?",
    "How do I boil an egg?",
]
BEFORE, AFTER = 0.3, 2.0  # seconds of silence around each question
RATE = 48000  # what browsers send


def write_question(folder: Path, name: str, text: str, voice: str) -> tuple[Path, float]:
    """A 48 kHz WAV of ``text`` in ``voice`` with silence around it; (path, speech end)."""
    speech = np.repeat(render(text, voice), 3)  # 16 → 48 kHz (the codec filters images)
    pad = [np.zeros(round(RATE * s), np.int16) for s in (BEFORE, AFTER)]
    path = folder / f"{name}.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(np.concatenate([pad[0], speech, pad[1]]).tobytes())
    return path, BEFORE + speech.size / RATE


async def wait_bot_done(client: RTCTestClient, stopped_before: int, within: float) -> None:
    deadline = time.monotonic() + within
    while client.types().count("bot-stopped-speaking") <= stopped_before:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer within {within:.0f} s")
        await asyncio.sleep(0.05)


async def run_turns(url: str, wavs: list[tuple[Path, float]], greeting: bool) -> dict[str, Any]:
    client = RTCTestClient(url)
    latencies: list[float] = []
    ttfb: dict[str, list[float]] = {}
    try:
        await client.connect()
        if greeting:
            await wait_bot_done(client, 0, 60)
            await asyncio.sleep(0.5)
        for wav, speech_end_offset in wavs:
            stopped_before = client.types().count("bot-stopped-speaking")
            end_of_speech = client.play(str(wav)) + speech_end_offset
            await wait_bot_done(client, stopped_before, 60)
            first = next(
                (t for t, rms in client.audio.frames if t > end_of_speech and rms > 200), None
            )
            latencies.append(first - end_of_speech if first is not None else float("nan"))
            await asyncio.sleep(0.5)
        for msg in client.messages:
            if msg.get("type") == "metrics" and "ttfb" in msg["data"]:
                for entry in msg["data"]["ttfb"]:
                    ttfb.setdefault(entry["processor"], []).append(entry["value"])
        said = [
            (m["type"], m["data"].get("text", ""))
            for m in client.messages
            if m.get("type") in ("user-transcription", "bot-output", "bot-llm-text")
            and m.get("data", {}).get("final", True)
        ]
    finally:
        await client.close()
    heard = [x for x in latencies if x == x]
    return {
        "voice_to_voice": stats(heard),
        "first_turn_ms": round(1000 * latencies[0], 1) if latencies else None,
        "unanswered": len(latencies) - len(heard),
        "turns_ms": [round(1000 * x) if x == x else None for x in latencies],
        "llm_ttfb_ms": [round(1000 * x) for x in ttfb.get("llm", [])],
        "server_ttfb_median_ms": {
            k: round(1000 * statistics.median(v), 1) for k, v in sorted(ttfb.items())
        },
        "dialogue": [f"{t}: {x}" for t, x in said if t != "bot-llm-text"][:60],
    }


def rss_mib(pid: int) -> int | None:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["embedded", "stub"], default="embedded")
    parser.add_argument("--turns", type=int, default=10, help="questions per voice")
    parser.add_argument("--voice", nargs="+", default=["espeak"], choices=["espeak", "hibari"])
    parser.add_argument("--env", nargs="*", default=[], help="KEY=VALUE server settings")
    parser.add_argument("--no-greeting", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    wavs = [
        write_question(folder, f"{voice}{n}", QUESTIONS[n % len(QUESTIONS)], voice)
        for voice in args.voice
        for n in range(args.turns)
    ]
    # The embedded models `make run` starts on (test servers default to the small LLM).
    env = {
        "PARLEY_LOG_LEVEL": "WARNING",
        "PARLEY_PRELOAD_MODELS": "true",
        "PARLEY_EMBEDDED_LLM": "qwen2.5-1.5b",
        "PARLEY_EMBEDDED_STT": "whisper-base",
    }
    if not args.no_greeting:
        env["PARLEY_GREETING"] = "Hello! How can I help you today?"
    stub = None
    if args.mode == "stub":
        stub = OpenAIStub().start()
        stub.config.default_text = "Sure, here is a short answer."
        stub.config.transcript = "what is two plus two"
        env |= {
            "PARLEY_STT": "openai", "PARLEY_LLM": "openai", "PARLEY_TTS": "openai",
            "PARLEY_OPENAI_BASE_URL": stub.base_url, "PARLEY_OPENAI_API_KEY": stub.api_key,
        }  # fmt: skip
    env |= dict(item.split("=", 1) for item in args.env)
    server = ServerProcess(env, folder / "server.log")
    try:
        started = time.monotonic()
        server.wait_models_ready(within=600)
        ready = time.monotonic() - started
        results = asyncio.run(run_turns(server.url, wavs, not args.no_greeting))
        results["models_ready_s"] = round(ready, 1)
        health = httpx.get(f"{server.url}/health", timeout=5).json()
        results["server_rss_mib"] = rss_mib(server.proc.pid)
        embedded = health["models"].get("embedded") or {}
        results["models"] = {k: v.get("model") for k, v in embedded.items()}
    finally:
        server.stop()
        if stub is not None:
            stub.stop()
    results["mode"] = args.mode
    print(json.dumps(results, indent=2))
    row = results["voice_to_voice"]
    print(
        "\n| mode | voices | turns | median ms | p95 ms | max ms | first turn ms |"
        "\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    print(
        f"| {args.mode} | {' '.join(args.voice)} | {row['n']} | {row.get('p50_ms')} | "
        f"{row.get('p95_ms')} | {row.get('max_ms')} | {results['first_turn_ms']} |"
    )


if __name__ == "__main__":
    main()
