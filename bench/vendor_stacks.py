"""Voice-to-voice with the vendors' speech stacks, each fake set to its vendor's published
latency, against the OpenAI-compatible path at the same model times, in one run.

Three stacks, one server each on 127.0.0.1, the same spoken questions through the aiortc
test client (real VAD and turn-taking), end of speech → first bot audio heard:

- ``deepgram+anthropic+cartesia``: live STT, Claude, a WebSocket voice with contexts;
- ``deepgram+openai+elevenlabs``: live STT, an OpenAI-compatible LLM, ElevenLabs;
- ``openai``: per-utterance STT, the same LLM, per-sentence HTTP TTS.

The figures the fakes are set to (seconds), and where they come from:

- the LLM's first token: 0.35 for every stack (issue 43's figure), then 20 ms a word;
- Deepgram's answer to a ``Finalize``: 0.15. Deepgram publishes "sub-300 ms" streaming
  latency for Nova-3 (deepgram.com/product/speech-to-text), which counts from speech;
  at a finalize the audio is already heard, so half of it;
- Cartesia's first audio: 0.09 (Cartesia: Sonic "90 ms model latency",
  docs.cartesia.ai, sonic model page);
- ElevenLabs' first audio: 0.075 (ElevenLabs: Flash v2.5 "~75 ms" model latency,
  elevenlabs.io/docs/models);
- the OpenAI-compatible path: STT 0.15 after the upload, TTS first audio 0.1 (the same
  model times). On 127.0.0.1 the per-request TCP and TLS set-up that a cloud HTTP TTS
  pays for every sentence costs nothing here, so this path's real cost is understated;
- a dead voice: Cartesia's URL at a socket that never answers the handshake, with
  ``PARLEY_TTS_FALLBACK=["openai"]``: what a vendor's failure costs the caller.

Prints per stack: v2v median / p95 / max, the server's CPU seconds per minute of call,
and what the bot said.

    .venv/bin/python -m bench.vendor_stacks --turns 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from bench.turn_taking import STAGES, metric_values
from bench.voice_latency import QUESTIONS, run_turns, write_question
from testkit.anthropic_stub import AnthropicStub, Reply
from testkit.cartesia_stub import CartesiaStub
from testkit.deepgram_stub import DeepgramStub
from testkit.elevenlabs_stub import ElevenLabsStub
from testkit.openai_stub import OpenAIStub
from testkit.server_process import ServerProcess

ANSWER = "Sure, here is a short answer. It comes in two sentences."
LLM_FIRST, LLM_WORD = 0.35, 0.02
STT_FINAL, CARTESIA_FIRST, ELEVENLABS_FIRST, HTTP_TTS_FIRST = 0.15, 0.09, 0.075, 0.1


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stacks(fakes: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each stack's server settings (all at the fakes)."""
    openai, deepgram = fakes["openai"], fakes["deepgram"]
    live_stt = {"stt": "deepgram", "deepgram_url": deepgram.url,
                "deepgram_api_key": deepgram.api_key}  # fmt: skip
    return {
        "deepgram+anthropic+cartesia": openai.server_settings(
            **live_stt,
            llm="anthropic",
            anthropic_url=fakes["anthropic"].url,
            anthropic_api_key=fakes["anthropic"].api_key,
            tts="cartesia",
            cartesia_url=fakes["cartesia"].url,
            cartesia_api_key=fakes["cartesia"].api_key,
        ),
        "deepgram+openai+elevenlabs": openai.server_settings(
            **live_stt,
            tts="elevenlabs",
            elevenlabs_url=fakes["elevenlabs"].url,
            elevenlabs_api_key=fakes["elevenlabs"].api_key,
        ),
        "openai": openai.server_settings(),
        # Cartesia never answers its handshake (a socket that is never accepted): every
        # sentence goes to the OpenAI-compatible voice after the fallback's one second.
        "deepgram+openai+dead-cartesia>openai": openai.server_settings(
            **live_stt,
            tts="cartesia",
            cartesia_url=f"ws://127.0.0.1:{fakes['dead'].getsockname()[1]}",
            cartesia_api_key="k",
            tts_fallback='["openai"]',
        ),
    }


def start_fakes(stack: ExitStack, turns: int) -> dict[str, Any]:
    openai = stack.enter_context(OpenAIStub())
    openai.config.default_text = ANSWER
    openai.config.transcript = "What is two plus two?"  # punctuated, as both STTs answer
    openai.config.first_token_delay, openai.config.token_delay = LLM_FIRST, LLM_WORD
    openai.config.stt_delay, openai.config.tts_first_audio_delay = STT_FINAL, HTTP_TTS_FIRST
    deepgram = stack.enter_context(DeepgramStub())
    deepgram.transcript, deepgram.finalize_delay = "What is two plus two?", STT_FINAL
    anthropic = stack.enter_context(AnthropicStub())
    anthropic.script(*[Reply(ANSWER, first_delay=LLM_FIRST, chunk_delay=LLM_WORD)] * turns * 2)
    cartesia = stack.enter_context(CartesiaStub())
    cartesia.first_audio_delay = CARTESIA_FIRST
    elevenlabs = stack.enter_context(ElevenLabsStub())
    elevenlabs.first_audio_delay = ELEVENLABS_FIRST
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead.listen(64)  # connections wait in the backlog, never accepted: a vendor gone silent
    stack.callback(dead.close)
    return {"openai": openai, "deepgram": deepgram, "anthropic": anthropic,
            "cartesia": cartesia, "elevenlabs": elevenlabs, "dead": dead}  # fmt: skip


def server_view(url: str) -> dict[str, Any]:
    """What the server measured: its own v2v and each stage's first byte (means, ms), and
    how often a held reply was used."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[str, Any] = {}
    for stage, (name, labels) in STAGES.items():
        total = metric_values(text, name).get(labels, 0.0)
        count = metric_values(text, name.replace("_sum", "_count")).get(labels, 0.0)
        out[f"{stage}_mean_ms"] = round(1000 * total / count) if count else None
    held = metric_values(text, "parley_preemptive_replies_total")
    out["held_replies"] = {k.split('"')[1]: v for k, v in held.items() if '"' in k}
    return out


def run_stack(name: str, settings: dict[str, str], wavs: list[tuple[Path, float]],
              folder: Path) -> dict[str, Any]:  # fmt: skip
    env = {"PARLEY_LOG_LEVEL": "WARNING", "PARLEY_GREETING": "",
           "PARLEY_ECHO_CANCELLATION": "false"}  # fmt: skip
    env |= {f"PARLEY_{k.upper()}": v for k, v in settings.items()}
    server = ServerProcess(env, folder / f"{name}.log")
    try:
        server.wait_models_ready(within=120)
        cpu, started = cpu_seconds(server.proc.pid), time.monotonic()
        result = asyncio.run(run_turns(server.url, wavs, greeting=False))
        minutes = (time.monotonic() - started) / 60
        result["cpu_s_per_call_minute"] = round((cpu_seconds(server.proc.pid) - cpu) / minutes, 2)
        result["server"] = server_view(server.url)
    finally:
        server.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--only", nargs="*", default=[], help="stack names to run")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    wavs = [write_question(folder, f"q{n}", QUESTIONS[n % len(QUESTIONS)], "espeak")
            for n in range(args.turns)]  # fmt: skip
    results: dict[str, Any] = {}
    with ExitStack() as stack:
        fakes = start_fakes(stack, args.turns)
        for name, settings in stacks(fakes).items():
            if not args.only or name in args.only:
                results[name] = run_stack(name, settings, wavs, folder)
    print(json.dumps(results, indent=2))
    print("\n| stack | turns | v2v p50 ms | p95 ms | max ms | CPU s per call-minute |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, result in results.items():
        row = result["voice_to_voice"]
        print(f"| {name} | {row['n']} | {row.get('p50_ms')} | {row.get('p95_ms')} | "
              f"{row.get('max_ms')} | {result['cpu_s_per_call_minute']} |")  # fmt: skip


if __name__ == "__main__":
    main()
