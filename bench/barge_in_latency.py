"""Barge-in latency against false pauses, for a few ways of pausing the bot (issue 24).

A pause is audible: the bot should go silent soon after the user starts talking over it,
and not at a cough, a breath, a door, someone talking in the background or its own echo.
Each design runs on its own servers (127.0.0.1, the OpenAI-compatible stub as LLM; one
aiortc client at a time):

- **latency**: the bot tells a long story (stub TTS: a buzz that is never silent, so a
  silence is the pause); at a random moment 1.5-5 s into each answer the client says a
  held-out question (``testkit.turn_clips.HELD_OUT_COMPLETE``, hibari and espeak). The
  latency is from the first sample of the question leaving the client's microphone (by
  the microphone's own 20 ms clock) to the arrival of the last loud frame (RMS > 200) of
  bot audio before it stays quiet for 200 ms; the bot answers each question, which is the
  next story. A barge-in counts as honoured when ``bot-interrupted`` follows.
- **false pauses**: the bot speaks with the embedded hibari voice while the client sends
  what is no turn: coughs (noise bursts, some with a voiced tail), breaths and clicks
  (``testkit.sounds``), one every 1.5-3 s; background speech (other sentences, another
  voice, 15-20 dB under the questions' level); and, with a fresh call per condition, the
  bot's own voice coming back into the microphone (``--echo``: gain dB and delay s), with
  nobody speaking. The STT hears no words (as of a cough), so every pause resumes or, for
  speech over 1 s, interrupts. Counted: the server's ``parley_bot_pauses_total`` (every
  outcome; ``unconfirmed``: paused at an onset the VAD then dropped) per minute of bot
  speech (``bot-started-speaking`` to ``bot-stopped-speaking`` at the client).

    .venv/bin/python -m bench.barge_in_latency                      # 5 designs, ~40 min
    .venv/bin/python -m bench.barge_in_latency --designs start-0.2,onset-auto --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from testkit.clip_ear import ClipEar
from testkit.measure import stats
from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess, metric
from testkit.sounds import breath, clicks, cough
from testkit.speech import at_level
from testkit.targets import start_stub, start_target
from testkit.turn_clips import (
    COMPLETE,
    HELD_OUT_COMPLETE,
    TurnClip,
    complete_clip,
    write_wav,
)

# Each design: the PARLEY_* settings that make it.
DESIGNS: dict[str, dict[str, str]] = {
    "start-0.2": {"PARLEY_PAUSE_AT_ONSET": "off"},  # before: pause at the confirmation
    "start-0.15": {"PARLEY_PAUSE_AT_ONSET": "off", "PARLEY_VAD_START_SECS": "0.15"},
    "start-0.1": {"PARLEY_PAUSE_AT_ONSET": "off", "PARLEY_VAD_START_SECS": "0.1"},
    "onset-on": {"PARLEY_PAUSE_AT_ONSET": "on"},  # at every onset
    "onset-auto": {"PARLEY_PAUSE_AT_ONSET": "auto"},  # at the onset once no echo comes back
}
STORY = (
    "Once upon a time there was a small robot who lived in a lighthouse by the sea. "
    "Every night it polished the great lamp until it shone like a star. "
    "Ships passed safely, and the sailors waved at the little robot. "
    "One stormy night the lamp went dark, and the robot climbed the tower in the rain. "
    "It fixed the lamp just in time, and the ships came home."
)
LOUD = 200.0  # RMS of a received frame that is bot audio, not silence
QUIET_HOLD = 10  # quiet frames in a row (200 ms) that end the bot's audio
PAUSES = "parley_bot_pauses_total"


def server(
    design: str, args: argparse.Namespace, ear: ClipEar, folder: Path, **env: str
) -> tuple[OpenAIStub, ServerProcess]:
    """The stub and a Parley server for ``design`` (``env``: more settings)."""
    stub = start_stub(args, STORY, "")
    stub.config.transcriber = ear
    settings = DESIGNS[design] | {f"PARLEY_{k.upper()}": v for k, v in env.items()}
    return stub, start_target("parley", args, stub, folder / f"{design}.log", settings)


# -- the client's clocks --------------------------------------------------------------------


def say(client: RTCTestClient, clip: TurnClip, path: Path) -> float:
    """Queue ``clip`` on the microphone; returns when its first sample is sent. The test
    microphone sends the frame of ``_pts`` at ``_start + _pts / 48000`` (it is usually
    asleep until then), so that is the onset, not the moment it was queued."""
    client.play(str(write_wav(clip, path, 0.0)))
    mic, now = client.mic, time.monotonic()
    due = (mic._start or now) + mic._pts / 48000
    return due if due >= now else due + 0.02


def last_loud(client: RTCTestClient, onset: float) -> float | None:
    """Arrival of the last loud bot frame after ``onset`` before QUIET_HOLD quiet ones;
    None if the bot was quiet from the onset on (no pause to measure)."""
    last, quiet = None, 0
    for t, rms in client.audio.frames:
        if t < onset:
            continue
        if rms > LOUD:
            last, quiet = t, 0
        else:
            quiet += 1
            if quiet >= QUIET_HOLD:
                return last
    return None


def speaking_seconds(client: RTCTestClient) -> float:
    """How long the bot has been speaking in this call (RTVI start/stop at the client)."""
    total, began = 0.0, None
    for message, t in zip(client.messages, client.arrivals, strict=True):
        kind = message.get("type")
        if kind == "bot-started-speaking" and began is None:
            began = t
        elif kind == "bot-stopped-speaking" and began is not None:
            total, began = total + t - began, None
    return total + (time.monotonic() - began if began is not None else 0.0)


def speaking(client: RTCTestClient) -> bool:
    """The bot is speaking (paused included) as the client was last told."""
    kinds = [k for k in client.types() if k in ("bot-started-speaking", "bot-stopped-speaking")]
    return bool(kinds) and kinds[-1] == "bot-started-speaking"


async def until(test: Any, within: float) -> bool:
    """Whether ``test()`` came true within ``within`` seconds."""
    deadline = time.monotonic() + within
    while not test():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def keep_talking(client: RTCTestClient, n: int) -> None:
    """Until the bot speaks: its answer to what was said, else a story asked for."""
    if await until(lambda: speaking(client), 4.0):
        return
    client.send_rtvi("send-text", {"content": f"Tell me a story ({n}).", "options": {}})
    assert await until(lambda: speaking(client), 20.0), "the bot does not answer"


# -- latency --------------------------------------------------------------------------------


async def barge_ins(url: str, ear: ClipEar, clips: list[TurnClip], seed: int,
                    folder: Path) -> list[dict[str, Any]]:  # fmt: skip
    """Each clip said over a story at a random moment; onset → the bot's last loud frame."""
    rng = random.Random(seed)
    results = []
    client = RTCTestClient(url, jitter_frames=1)
    try:
        await client.connect()
        for n, clip in enumerate(clips):
            await keep_talking(client, n)
            await asyncio.sleep(rng.uniform(1.5, 5.0))
            cut = client.types().count("bot-interrupted")
            ear.clip = clip
            onset = say(client, clip, folder / "barge.wav")
            honoured = await until(lambda c=cut: client.types().count("bot-interrupted") > c, 6)
            await asyncio.sleep(0.4)  # the quiet after the last loud frame arrives
            last = last_loud(client, onset)
            results.append({
                "clip": clip.name, "honoured": honoured,
                "latency": None if last is None else round(last - onset, 3),
            })  # fmt: skip
            ear.clip = None
            await until(lambda: not speaking(client), 5.0)  # the question's turn ends
    finally:
        await client.close()
    return results


# -- false pauses ---------------------------------------------------------------------------


def noises(seed: int) -> list[TurnClip]:
    """Coughs (plain and voiced), breaths and clicks at their levels, shuffled."""
    rng = np.random.default_rng(seed)
    made = []
    for i in range(24):
        kind = ("cough", "voiced cough", "breath", "clicks")[i % 4]
        if kind == "breath":
            audio = at_level(breath(seed + i, rng.uniform(0.3, 0.5)), rng.uniform(-45, -35))
        elif kind == "clicks":
            audio = at_level(clicks(seed + i), rng.uniform(-30, -20))
        else:
            sound = cough(seed + i, rng.uniform(0.1, 0.3), voiced=kind == "voiced cough")
            audio = at_level(sound, rng.uniform(-25, -15))
        made.append(TurnClip(f"{kind}{i}", "noise", kind, "", audio, []))
    random.Random(seed).shuffle(made)
    return made


def babble(level: float, seed: int) -> list[TurnClip]:
    """Other sentences in the other voices, 15-20 dB under ``level`` (dBFS RMS)."""
    rng = np.random.default_rng(seed)
    made = []
    for i, text in enumerate(COMPLETE[:8]):
        clip = complete_clip(text, ("espeak", "hibari")[i % 2])
        audio = at_level(clip.audio, level - rng.uniform(15, 20))
        made.append(TurnClip(f"babble{i}", clip.voice, "babble", "", audio, []))
    return made


async def sounds_over(url: str, sounds: list[TurnClip], bot_seconds: float, seed: int,
                      folder: Path) -> float:  # fmt: skip
    """The bot speaks for ``bot_seconds`` in all (a story asked for whenever it is
    silent) while the client sends ``sounds`` in turn, one every 1.5-3 s. Returns the
    seconds of bot speech they were sent over."""
    rng = random.Random(seed)
    client = RTCTestClient(url, jitter_frames=1)
    try:
        await client.connect()
        cycle = itertools.cycle(sounds)
        for n in itertools.count():
            if speaking_seconds(client) >= bot_seconds:
                break
            await keep_talking(client, n)
            await asyncio.sleep(rng.uniform(1.5, 3.0))
            if speaking(client):
                say(client, next(cycle), folder / "sound.wav")
        seconds = speaking_seconds(client)
        await asyncio.sleep(2.0)  # pauses still being judged end (and are counted)
        return seconds
    finally:
        await client.close()


async def echo_over(url: str, echo: tuple[float, float]) -> float:
    """One whole answer in a new call whose microphone hears the bot (``echo``: gain dB,
    delay s) and nobody else; returns the seconds of bot speech."""
    client = RTCTestClient(url, jitter_frames=1, echo=echo)
    try:
        await client.connect()
        await keep_talking(client, 0)
        await until(lambda: not speaking(client), 90.0)
        await asyncio.sleep(2.0)
        return speaking_seconds(client)
    finally:
        await client.close()


async def counted(server: ServerProcess, run: Any) -> dict[str, Any]:
    """The pauses ``run`` made, per minute of bot speech."""
    names = (PAUSES, *(f'{PAUSES}{{outcome="{o}"}}' for o in ("unconfirmed", "interrupted")),
             *(f"parley_bot_pause_seconds_{part}" for part in ("sum", "count")))  # fmt: skip
    before = [metric(server, name) for name in names]
    seconds = await run
    pauses, unconfirmed, interrupted, silent, resumed = (
        metric(server, n) - b for n, b in zip(names, before, strict=True)
    )
    per_minute = 60 * pauses / seconds if seconds else None
    return {"bot_seconds": round(seconds, 1), "pauses": int(pauses),
            "unconfirmed": int(unconfirmed), "interrupted": int(interrupted),
            "per_minute": None if per_minute is None else round(per_minute, 2),
            # How long the pauses that resumed lasted, on the server's clock.
            "resumed_pause_ms": round(1000 * silent / resumed) if resumed else None}  # fmt: skip


def false_pauses(design: str, args: argparse.Namespace, level: float, folder: Path) -> dict:
    """Noises, background speech and echo over the bot's hibari voice, for one design
    (a part whose seconds or answers are 0 is left out)."""
    ear = ClipEar()  # its clip stays None: it hears no words
    stub, running = server(design, args, ear, folder, tts="local")
    out: dict[str, Any] = {}
    try:
        url, seed = running.url, args.seed
        if args.bot_seconds:
            run = sounds_over(url, noises(seed), args.bot_seconds, seed, folder)
            out["noises"] = asyncio.run(counted(running, run))
        if args.babble_seconds:
            run = sounds_over(url, babble(level, seed), args.babble_seconds, seed, folder)
            out["babble"] = asyncio.run(counted(running, run))
        for spec in args.echo.split(",") if args.echo_answers else ():
            gain, delay = (float(x) for x in spec.split(":"))
            runs = [asyncio.run(counted(running, echo_over(url, (gain, delay))))
                    for _ in range(args.echo_answers)]  # fmt: skip
            out[f"echo {gain:g} dB {round(delay * 1000)} ms"] = pooled(runs)
    finally:
        running.stop()
        stub.stop()
    return out


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts of several runs added up, per minute recomputed (pause lengths dropped)."""
    total = {k: sum(r[k] for r in runs) for k in ("bot_seconds", "pauses", "unconfirmed",
                                                  "interrupted")}  # fmt: skip
    seconds = total["bot_seconds"]
    total["per_minute"] = round(60 * total["pauses"] / seconds, 2) if seconds else None
    return total


# -- the run --------------------------------------------------------------------------------


def latency(design: str, args: argparse.Namespace, clips: list[TurnClip], folder: Path) -> dict:
    """The barge-ins over the stub's voice, for one design."""
    ear = ClipEar()
    stub, running = server(design, args, ear, folder)
    try:
        results = asyncio.run(barge_ins(running.url, ear, clips, args.seed, folder))
    finally:
        running.stop()
        stub.stop()
    # None or <= 0: the bot was quiet when the question began (no pause to time).
    measured = [r["latency"] for r in results if r["latency"] is not None and r["latency"] > 0]
    return {"n": len(results), "honoured": sum(r["honoured"] for r in results),
            "untimed": len(results) - len(measured), "latency": stats(measured),
            "runs": results}  # fmt: skip


def table(report: dict[str, Any]) -> str:
    """The designs side by side, as a Markdown table (parts not run: "-")."""
    rows = ["| design | barge-ins honoured | onset → last loud frame p50 / p95 ms "
            "| false pauses / min: coughs, breaths, clicks | background speech "
            "| echo (all conditions) | of which unconfirmed |",
            "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for design, out in report.items():
        lat, fp = out.get("latency"), out.get("false_pauses", {})
        echo = [v for k, v in fp.items() if k.startswith("echo")]
        cells = [design, "-", "-"]
        if lat:
            timed = lat["latency"]
            cells[1:] = [f"{lat['honoured']}/{lat['n']}",
                         f"{timed.get('p50_ms')} / {timed.get('p95_ms')}"]  # fmt: skip
        for part in (fp.get("noises"), fp.get("babble"), pooled(echo) if echo else None):
            counts = None if part is None else f"({part['pauses']} in {part['bot_seconds']:.0f} s)"
            cells.append("-" if part is None else f"{part['per_minute']} {counts}")
        cells.append(str(sum(v["unconfirmed"] for v in fp.values())) if fp else "-")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--designs", default=",".join(DESIGNS))
    parser.add_argument("--questions", type=int, default=6, help="held-out, x2 voices; 0: none")
    parser.add_argument("--bot-seconds", type=float, default=90.0, help="of coughs etc.; 0: none")
    parser.add_argument("--babble-seconds", type=float, default=60.0, help="0: none")
    parser.add_argument("--echo", default=",".join(f"{g}:{d}" for g in (-20, -10, -6, -3)
                                                   for d in (0.15, 0.3)))  # fmt: skip
    parser.add_argument("--echo-answers", type=int, default=1, help="per condition; 0: none")
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    # What start_stub / start_target read: the stub's delays and the turn settings.
    args.stt_delay, args.llm_delay, args.tts_delay, args.tts_seconds_per_char = 0.05, 0.2, 0.1, 0.05
    args.users, args.vad_stop_secs, args.user_speech_timeout = 1, 0.2, 0.6
    args.turn_end = "adaptive"
    folder = Path(tempfile.mkdtemp(prefix="barge-in-"))
    clips = [complete_clip(t, v) for t in HELD_OUT_COMPLETE[: max(1, args.questions)]
             for v in ("hibari", "espeak")]  # fmt: skip
    # The questions' level (dBFS RMS): background speech is set 15-20 dB under it.
    level = float(np.mean([20 * np.log10(np.sqrt(np.mean(c.audio.astype(float) ** 2)) / 32768)
                           for c in clips]))  # fmt: skip
    report: dict[str, Any] = {}
    for design in args.designs.split(","):
        out: dict[str, Any] = {}
        if args.questions:
            out["latency"] = latency(design, args, clips, folder)
            print(design, "latency", json.dumps(out["latency"]["latency"]), flush=True)
        if args.bot_seconds or args.babble_seconds or args.echo_answers:
            out["false_pauses"] = false_pauses(design, args, level, folder)
            print(design, "false pauses", json.dumps(out["false_pauses"]), flush=True)
        report[design] = out
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(table(report))
    print(f"\nlogs: {folder}")


if __name__ == "__main__":
    main()
