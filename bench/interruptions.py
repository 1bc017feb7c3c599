"""Interruptions over WebRTC: barge-in latency, backchannels, coughs, and the bot's own
echo, for Parley (pausing first, echo cancelled), Parley as before (cut at once, no echo
handling) and Pipecat 1.14.

One aiortc client per part; the bot tells a long story (the stub LLM) and the client talks
over it. STT is the stub hearing the words of the clip it plays (a good STT service) for
the barge-in, backchannel and cough parts; the echo part uses the embedded whisper and
hibari voice, as a user of the default would, and a client whose loudspeaker plays into
its microphone (`--echo-levels`, `--echo-delays`).

- barge-in: speech onset → the bot's audio silent at the client, and whether the
  interruption was honoured (the bot stopped and answered it);
- backchannels ("Mhm.", "Yeah.", "Okay." and more, two voices): cut off (the reply was
  cancelled or answered as a turn) or not, and how long the bot paused if it did;
- coughs (noise bursts): the same;
- echo: self-interruptions (pauses or cuts of the bot with nobody speaking) over long
  answers, then barge-ins over the echo honoured;
- the echo path's CPU per second of audio, echo present and absent (in this process).

    .venv/bin/python -m bench.interruptions [--targets parley,parley-before,pipecat]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from pipeline.audio.echo import EchoCanceller
from testkit.clip_ear import ClipEar
from testkit.measure import stats
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess
from testkit.targets import PipecatProcess
from testkit.turn_clips import RATE, TurnClip, complete_clip, render, write_wav

STORY = (
    "Once upon a time there was a small robot who lived in a lighthouse by the sea. "
    "Every night it polished the great lamp until it shone like a star. "
    "Ships passed safely, and the sailors waved at the little robot. "
    "One stormy night the lamp went dark, and the robot climbed the tower in the rain. "
    "It fixed the lamp just in time, and the ships came home."
)
BARGE_INS = (
    "Wait, stop. Tell me about the weather instead.",
    "Hold on, what time is it?",
    "Sorry, can you say that again?",
    "No, I meant the other story.",
)
BACKCHANNELS = ("Mhm.", "Yeah.", "Okay.", "Uh-huh.", "Right.", "I see.")
RMS = 200.0


def cough(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = round(0.25 * RATE)
    return (6000 * rng.normal(0, 1, n) * np.exp(-np.arange(n) / 1200)).astype(np.int16)


def start(target: str, stub: OpenAIStub, folder: Path, **env: str) -> ServerProcess:
    if target == "pipecat":
        args = argparse.Namespace(
            vad_stop_secs=0.2, user_speech_timeout=0.6, pipecat_stop="smart-turn"
        )
        return PipecatProcess(args, stub.base_url, stub.api_key, folder / "pipecat.log")
    settings = {
        "PARLEY_STT": "openai", "PARLEY_LLM": "openai", "PARLEY_TTS": "openai",
        "PARLEY_OPENAI_BASE_URL": stub.base_url, "PARLEY_OPENAI_API_KEY": stub.api_key,
        "PARLEY_PRELOAD_MODELS": "true", "PARLEY_LOG_LEVEL": "INFO",
        **{f"PARLEY_{k.upper()}": v for k, v in env.items()},
    }  # fmt: skip
    if target == "parley-before":
        settings |= {"PARLEY_PAUSE_ON_INTERRUPTION": "false", "PARLEY_ECHO_CANCELLATION": "false"}
    server = ServerProcess(settings, folder / f"{target}.log")
    server.wait_models_ready()
    return server


def loud(client: RTCTestClient, a: float, b: float) -> list[float]:
    return [t for t, rms in client.audio.frames if a <= t < b and rms > RMS]


def longest_gap(times: list[float], a: float, b: float) -> float:
    """The longest stretch without loud frames between ``a`` and ``b``."""
    marks = [a, *[t for t in times if a <= t <= b], b]
    return max(y - x for x, y in itertools.pairwise(marks))


async def story(client: RTCTestClient, n: int) -> float:
    """Ask for the story (the n-th time in this call); returns when its audio began."""
    before = client.types().count("bot-started-speaking")
    client.send_rtvi("send-text", {"content": f"Tell me a story, please ({n}).", "options": {}})
    deadline = time.monotonic() + 20
    while client.types().count("bot-started-speaking") <= before:
        assert time.monotonic() < deadline, "no answer"
        await asyncio.sleep(0.02)
    return client.arrivals[
        max(i for i, m in enumerate(client.messages) if m.get("type") == "bot-started-speaking")
    ]


async def quiet_bot(client: RTCTestClient, within: float = 30.0) -> None:
    """Until the bot has been silent for a second."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        heard = loud(client, time.monotonic() - 1.0, time.monotonic())
        if not heard:
            return


async def over_the_bot(url: str, ear: ClipEar, clips: list[TurnClip], folder: Path) -> list[dict]:
    """For each clip: the bot tells the story, the user says the clip 2 s into it."""
    results = []
    client = RTCTestClient(url, jitter_frames=1)
    try:
        await client.connect()
        for n, clip in enumerate(clips):
            began = await story(client, n)
            await asyncio.sleep(max(0.0, began + 2.0 - time.monotonic()))
            interrupted = client.types().count("bot-interrupted")
            ear.clip = clip
            onset = client.play(str(write_wav(clip, folder / f"over{n}.wav", 0.0)))
            await asyncio.sleep(clip.audio.size / RATE + 2.5)
            silent = client.silent_since(onset)
            gap = longest_gap(loud(client, onset, onset + 3.0), onset, onset + 3.0)
            cut = client.types().count("bot-interrupted") > interrupted
            after = loud(client, onset + clip.audio.size / RATE + 1.5, time.monotonic())
            results.append({
                "clip": clip.text or clip.name, "voice": clip.voice,
                "cut": cut or not after,
                "silent_after_onset": None if silent is None else round(silent - onset, 3),
                "pause": round(gap, 3),
            })  # fmt: skip
            await quiet_bot(client)
            await asyncio.sleep(0.5)
    finally:
        await client.close()
    return results


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    pattern = rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$"
    return sum(float(v) for v in re.findall(pattern, text, re.M))


async def with_echo(url: str, ear: ClipEar, echo: tuple[float, float], answers: int,
                    barge: bool, folder: Path) -> dict:  # fmt: skip
    """Long answers with the bot's voice coming back; self-interruptions, or barge-ins."""
    client = RTCTestClient(url, jitter_frames=1, echo=echo)
    honoured = 0
    try:
        await client.connect()
        for n in range(answers):
            began = await story(client, n)
            if barge:
                await asyncio.sleep(max(0.0, began + 4.0 - time.monotonic()))
                before = client.types().count("bot-interrupted")
                clip = complete_clip(BARGE_INS[n % len(BARGE_INS)], "espeak")
                ear.clip = clip
                client.play(str(write_wav(clip, folder / f"echo-barge{n}.wav", 0.0)))
                await asyncio.sleep(3.0)
                honoured += client.types().count("bot-interrupted") > before
            await quiet_bot(client, within=60)
            await asyncio.sleep(0.5)
        async with httpx.AsyncClient() as http:
            info = (await http.get(f"{url}/api/sessions/{client.pc_id}", timeout=5)).json()
    finally:
        await client.close()
    started = client.types().count("user-started-speaking")
    return {
        "answers": answers,
        "user_turns_started": started,
        "interruptions": client.types().count("bot-interrupted"),
        "barge_ins_honoured": honoured if barge else None,
        "pauses": metric(url, "parley_bot_pauses_total"),
        "echo": info.get("conversation", {}).get("echo"),
    }


def echo_cpu() -> dict[str, float]:
    """% of a core per second of audio, the echo path alone, echo present and absent."""
    bot = render(STORY, "hibari")
    out = {}
    for name, gain in (("present", -10.0), ("absent", None)):
        mic = np.random.default_rng(0).normal(0, 20, bot.size)
        if gain is not None:
            d = round(0.15 * RATE)
            mic[d:] += bot[: bot.size - d] * 10 ** (gain / 20)
        mic16 = np.clip(mic, -32768, 32767).astype(np.int16)
        canceller = EchoCanceller()
        spent = 0.0
        for i in range(0, bot.size - 320 + 1, 320):
            frame48 = np.repeat(bot[i : i + 320], 3).tobytes()
            t0 = time.perf_counter()
            canceller.played(frame48, 48000, i / RATE)
            canceller.process(mic16[i : i + 320].tobytes(), i / RATE)
            spent += time.perf_counter() - t0
        out[f"echo {name}"] = round(100 * spent / (bot.size / RATE), 2)
    return out


def summarise(results: list[dict]) -> dict[str, Any]:
    paused = [r["pause"] for r in results if not r["cut"] and r["pause"] > 0.1]
    return {
        "n": len(results),
        "cut_off": sum(r["cut"] for r in results),
        "paused": len(paused),
        "pause": stats(paused),
        "cut_clips": [f"{r['voice']}:{r['clip']}" for r in results if r["cut"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--targets", default="parley,parley-before,pipecat")
    parser.add_argument("--echo-levels", default="-20,-10,-6,-3")
    parser.add_argument("--echo-delays", default="0.15,0.3")
    parser.add_argument("--echo-answers", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="interruptions-"))
    barge = [complete_clip(t, v) for t in BARGE_INS for v in ("hibari", "espeak")]
    backchannels = [complete_clip(t, v) for t in BACKCHANNELS for v in ("hibari", "espeak")]
    coughs = [TurnClip(f"cough{s}", "noise", "cough", "", cough(s), []) for s in range(4)]
    report: dict[str, Any] = {"targets": {}, "echo_cpu_pct_of_a_core": echo_cpu()}
    for target in args.targets.split(","):
        ear = ClipEar()
        with OpenAIStub() as stub:
            stub.config.transcriber = ear
            stub.config.default_text = STORY
            stub.config.stt_delay, stub.config.first_token_delay = 0.05, 0.2
            stub.config.tts_first_audio_delay, stub.config.tts_seconds_per_char = 0.1, 0.05
            server = start(target, stub, folder)
            try:
                out: dict[str, Any] = {}
                result = asyncio.run(over_the_bot(server.url, ear, barge, folder))
                silent = [r["silent_after_onset"] for r in result if r["silent_after_onset"]]
                out["barge_in"] = {"honoured": sum(r["cut"] for r in result), "n": len(result),
                                   "onset_to_silent": stats(silent)}  # fmt: skip
                out["backchannels"] = summarise(
                    asyncio.run(over_the_bot(server.url, ear, backchannels, folder))
                )
                out["coughs"] = summarise(
                    asyncio.run(over_the_bot(server.url, ear, coughs, folder))
                )
            finally:
                server.stop()
            if target != "pipecat":
                out["echo"] = run_echo(target, args, stub, ear, folder)
        report["targets"][target] = out
        print(target, json.dumps(out, indent=1), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(json.dumps(report["echo_cpu_pct_of_a_core"]))
    print(f"\nlogs: {folder}")


def run_echo(target: str, args: argparse.Namespace, stub: OpenAIStub, ear: ClipEar,
             folder: Path) -> dict[str, Any]:  # fmt: skip
    """The echo table: embedded STT and voice (hibari), the stub's long story."""
    table: dict[str, Any] = {}
    ear.clip = None
    for level in (float(x) for x in args.echo_levels.split(",")):
        for delay in (float(x) for x in args.echo_delays.split(",")):
            main_case = level == -10.0 and delay == 0.15
            answers = args.echo_answers if main_case else 1
            server = start(target, stub, folder, stt="local", tts="local")
            try:
                quiet = asyncio.run(
                    with_echo(server.url, ear, (level, delay), answers, False, folder)
                )
                if main_case:
                    quiet["over_echo"] = asyncio.run(
                        with_echo(server.url, ear, (level, delay), answers, True, folder)
                    )
            finally:
                server.stop()
            table[f"{level:g} dB, {round(delay * 1000)} ms"] = quiet
            print(target, level, delay, quiet, flush=True)
    return table


if __name__ == "__main__":
    main()
