"""A question asked over the greeting: is it heard and answered?

A caller who talks at once, as the call connects, speaks over the bot's greeting while the
echo canceller does not yet know whether the bot's voice comes back (issue 24). Each call
here: the client connects and, at once (``--start connect``) or when the greeting's
first audio arrives (``--start greeting``), says a short question (1.4-1.9 s: five
questions in two voices, hibari and espeak); then the call waits for the answer.

Variants (``--variants``), each on its own server with the greeting on:

- ``aec``: echo cancellation on (the default), the client cancels its own echo;
- ``raw``: ``PARLEY_ECHO_CANCELLATION=false``;
- ``echo``: echo cancellation on, and the client's loudspeaker plays the bot back into
  its microphone (``--echo``: gain dB, delay s), as bench/interruptions.py's echoing
  client does;
- ``echo-silent``: the same echo, and the caller says nothing: whether the bot's own
  voice makes it pause or stop (self-interruptions) at the start of a call;
- ``mute``: ``PARLEY_USER_MUTE=first_bot_speech``: the question should be dropped on
  purpose, and reported so.

Per call: answered (a ``user-llm-text`` holding every word of the question: it reached
the LLM whole), partly (some words only), not at all; when the server's VAD confirmed the
speech (``user-started-speaking``, from the question's first sample, client clock);
voice-to-voice (end of the question to the answer's first loud frame); pauses and
interruptions of the bot, and the turns started after the question reached the LLM (the
caller is silent by then: the bot's own echo) and the answers cut; and the utterances
the server discarded, by reason (its ``parley_user_speech_discarded_total`` and the
stored transcript's ``discard`` events).
``--users 1,5,10`` runs ``--calls`` calls at each concurrency (rounds of N calls at once).

The models: the OpenAI-compatible stub in this process (STT 50 ms: it hears the words of
the clip being played where the utterance lies in it, :class:`testkit.clip_ear.ClipEar`;
LLM 200 ms) and the embedded voice (``--tts local``, hibari: a real voice for the echo
canceller's reference) or the stub's buzz (``--tts stub``). ``--stt local`` puts the
embedded whisper in place of the ClipEar: an echo that reaches the STT is then heard as
the bot's words (which the barge-in dismisses as its echo), where the ClipEar, matching
envelopes, would place it somewhere in the question and return the question's words.

    .venv/bin/python -m bench.greeting_overlap --users 1,5,10 --variants aec,raw,echo
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from testkit.clip_ear import ClipEar
from testkit.exposition import parse
from testkit.measure import stats
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess
from testkit.targets import start_stub, start_target
from testkit.turn_clips import TurnClip, complete_clip, write_wav

QUESTIONS = (
    "Can you tell me what the answer is?",
    "What time does the museum open?",
    "Is the pharmacy open on Sundays?",
    "Where can I park my car tonight?",
    "Do I need a reservation for dinner?",
)
VOICES = ("hibari", "espeak")
ANSWER = "The answer is forty two."
GREETING = "Hello! How can I help you today?"
RMS = 200.0  # a received frame louder than this is the bot speaking
ANSWER_WAIT = 8.0  # after the question: no answer by then, none is coming
QUIET = 1.0  # the bot silent this long (after the question): the call is over
VARIANTS = ("aec", "raw", "echo", "echo-silent", "mute")


def words(text: str) -> list[str]:
    return re.sub(r"[^\w' ]", " ", text.lower()).split()


def loud(client: RTCTestClient, since: float) -> list[float]:
    return [t for t, rms in client.audio.frames if t >= since and rms > RMS]


def arrivals(client: RTCTestClient, type_: str) -> list[tuple[float, dict[str, Any]]]:
    return [(t, m) for t, m in zip(client.arrivals, client.messages, strict=True)
            if m.get("type") == type_]  # fmt: skip


async def one_call(url: str, clip: TurnClip | None, wav: Path | None, args: argparse.Namespace,
                   echo: tuple[float, float] | None) -> dict[str, Any]:  # fmt: skip
    """Connect, say the question (``clip``; None: say nothing), wait for the answer."""
    client = RTCTestClient(url, jitter_frames=1, echo=echo)
    out: dict[str, Any] = {"clip": clip.name if clip else None}
    try:
        await client.connect()
        connected = time.monotonic()
        if args.start == "greeting":
            await _first_greeting_audio(client, connected)
        said = client.play(str(wav)) if wav is not None else time.monotonic()
        end = said + (clip.speech_end if clip else 0.0)
        await _wait_for_answer(client, end)
        out |= _outcome(client, clip, connected, said, end)
        out["pc_id"] = client.pc_id
    except Exception as exc:  # one call's failure is a result, not a crash
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        await client.close()
    return out


async def _first_greeting_audio(client: RTCTestClient, since: float) -> None:
    """Until the greeting's first loud frame arrives (10 s at most)."""
    deadline = since + 10
    while not loud(client, since) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)


async def _wait_for_answer(client: RTCTestClient, end: float) -> None:
    """Until the bot has been quiet for ``QUIET`` after an answer (or after the greeting
    when no answer comes within ``ANSWER_WAIT``)."""
    limit = end + ANSWER_WAIT + 10
    while (now := time.monotonic()) < limit:
        await asyncio.sleep(0.05)
        if now < end + 0.5:
            continue
        answered = bool(arrivals(client, "user-llm-text"))
        recent = loud(client, now - QUIET)
        if not recent and ((answered and loud(client, end)) or now > end + ANSWER_WAIT):
            return


def _outcome(client: RTCTestClient, clip: TurnClip | None, connected: float, said: float,
             end: float) -> dict[str, Any]:  # fmt: skip
    greeting = loud(client, connected)
    texts = arrivals(client, "user-llm-text")
    heard = " ".join(m["data"]["text"] for _, m in texts)
    asked = words(clip.text) if clip else []
    got = set(words(heard))
    share = sum(w in got for w in asked) / len(asked) if asked else 0.0
    started = arrivals(client, "user-started-speaking")
    answer_at = None
    if texts:
        after = [t for t, _ in arrivals(client, "bot-started-speaking") if t >= texts[0][0]]
        frames = loud(client, after[0]) if after else []
        answer_at = frames[0] if frames else None
    # After the question reached the LLM the caller says nothing: turns started then are
    # the bot's own voice (its echo), and an answer cut is a self-interruption.
    asked_at = texts[0][0] if texts else float("inf")
    later = [t for t, _ in started if t > asked_at]
    cut = [t for t, _ in arrivals(client, "bot-interrupted") if t > asked_at]
    return {
        "answered": "whole" if share == 1.0 else "part" if texts else "no",
        "turns_after_question": len(later),
        "answer_cut": len(cut),
        "heard": heard,
        "greeting_after_question": round(greeting[0] - said, 3) if greeting else None,
        "vad_confirmed": round(started[0][0] - said, 3) if started else None,
        "voice_to_voice": round(answer_at - end, 3) if answer_at else None,
        "interrupted": client.types().count("bot-interrupted"),
        "user_turns_started": len(started),
        "muted": "user-mute-started" in client.types(),
    }


async def _discards(url: str, pc_id: str | None) -> list[dict[str, Any]]:
    """The stored transcript's ``discard`` events of one call."""
    if pc_id is None:
        return []
    events: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=30) as http:
        for _ in range(20):  # the record is written a moment after the call closes
            try:
                response = await http.get(f"{url}/api/sessions/{pc_id}/transcript")
            except httpx.HTTPError:
                continue  # a loaded server: ask again
            if response.status_code == 200:
                events = response.json().get("events", [])
                if response.json().get("ended_at"):
                    break
            await asyncio.sleep(0.1)
    return [e["data"] for e in events if e["type"] in ("discard", "backchannel")]


def counters(url: str) -> dict[str, float]:
    metrics = parse(httpx.get(f"{url}/metrics", timeout=30).text)
    out = {
        "pauses": metrics.total("parley_bot_pauses_total"),
        "interruptions": metrics.total("parley_interruptions_total"),
    }
    for reason in ("backchannel", "echo", "no_words", "muted", "stt_error", "call_ended"):
        out[f"discarded:{reason}"] = metrics.total(
            f'parley_user_speech_discarded_total{{reason="{reason}"}}'
        )
    return out


async def run_variant(server: ServerProcess, ear: ClipEar, clips: list[TurnClip],
                      folder: Path, users: int, args: argparse.Namespace,
                      variant: str) -> dict[str, Any]:  # fmt: skip
    echo = tuple(float(x) for x in args.echo.split(",")) if variant.startswith("echo") else None
    silent = variant == "echo-silent"
    before = counters(server.url)
    calls: list[dict[str, Any]] = []
    for n in range(0, args.calls, users):
        clip = clips[(n // users) % len(clips)]
        ear.clip = None if silent else clip
        wav = None if silent else write_wav(clip, folder / f"q{n}.wav", 0.0)
        batch = await asyncio.gather(*(
            one_call(server.url, None if silent else clip, wav, args, echo)  # type: ignore[arg-type]
            for _ in range(min(users, args.calls - n))
        ))  # fmt: skip
        for call in batch:
            call["discards"] = await _discards(server.url, call.get("pc_id"))
        calls += batch
        await asyncio.sleep(1.0)
    after = counters(server.url)
    return summarise(calls, {k: after[k] - before[k] for k in after if after[k] != before[k]})


def summarise(calls: list[dict[str, Any]], metrics: dict[str, float]) -> dict[str, Any]:
    ok = [c for c in calls if "error" not in c]
    answered = Counter(c["answered"] for c in ok)
    reasons = Counter(d.get("reason", "backchannel") for c in ok for d in c["discards"])
    return {
        "calls": len(calls),
        "errors": [c["error"] for c in calls if "error" in c],
        "answered_whole": answered["whole"],
        "answered_part": answered["part"],
        "not_answered": answered["no"],
        "vad_confirmed": stats([c["vad_confirmed"] for c in ok if c["vad_confirmed"] is not None]),
        "greeting_after_question": stats(
            [c["greeting_after_question"] for c in ok if c["greeting_after_question"] is not None]
        ),
        "voice_to_voice": stats([c["voice_to_voice"] for c in ok if c["voice_to_voice"]]),
        "calls_interrupting_the_bot": sum(1 for c in ok if c["interrupted"]),
        "user_turns_started": sum(c["user_turns_started"] for c in ok),
        "turns_after_question": sum(c["turns_after_question"] for c in ok),
        "answers_cut": sum(1 for c in ok if c["answer_cut"]),
        "muted_calls": sum(1 for c in ok if c["muted"]),
        "stored_discards": dict(reasons),
        "metrics": metrics,
        "heard_when_not_whole": [c["heard"] for c in ok if c["answered"] != "whole"],
    }


def server_env(variant: str, args: argparse.Namespace) -> dict[str, str]:
    env = {"PARLEY_GREETING": GREETING, "PARLEY_TTS": "openai" if args.tts == "stub" else "local",
           "PARLEY_TURN_END": "adaptive", "PARLEY_MAX_SESSIONS": "30"}  # fmt: skip
    if variant == "raw":
        env["PARLEY_ECHO_CANCELLATION"] = "false"
    if variant == "mute":
        env["PARLEY_USER_MUTE"] = "first_bot_speech"
    if args.stt == "local":
        env["PARLEY_STT"] = "local"  # the embedded whisper: the echo's words are the bot's
    return env


def table(report: dict[str, Any]) -> str:
    head = "| variant | users | whole | part | none | VAD confirmed p50/max ms | v2v p50/max ms "
    head += "| greeting after question p50 ms | bot interrupted (calls) | pauses "
    head += "| turns after the question / answers cut | discards |"
    rows = [head, "|" + " --- |" * 12]
    for key, s in report.items():
        variant, users = key.rsplit("@", 1)
        vad, v2v, lag = s["vad_confirmed"], s["voice_to_voice"], s["greeting_after_question"]
        rows.append(
            f"| {variant} | {users} | {s['answered_whole']}/{s['calls']} | {s['answered_part']} "
            f"| {s['not_answered']} | {vad.get('p50_ms', '-')}/{vad.get('max_ms', '-')} "
            f"| {v2v.get('p50_ms', '-')}/{v2v.get('max_ms', '-')} | {lag.get('p50_ms', '-')} "
            f"| {s['calls_interrupting_the_bot']} | {int(s['metrics'].get('pauses', 0))} "
            f"| {s['turns_after_question']} / {s['answers_cut']} | {s['stored_discards'] or '-'} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", default="1,5,10")
    parser.add_argument("--calls", type=int, default=20, help="calls per concurrency")
    parser.add_argument("--variants", default="aec,raw,echo,echo-silent")
    parser.add_argument("--start", choices=("connect", "greeting"), default="connect")
    parser.add_argument("--tts", choices=("local", "stub"), default="local")
    parser.add_argument(
        "--stt",
        choices=("ear", "local"),
        default="ear",
        help="ear: the stub hears the clip's words; local: embedded whisper",
    )
    parser.add_argument("--echo", default="-10,0.15", help="gain dB, delay s")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    # start_stub / start_target's knobs: the delays of bench/turn_taking.py.
    knobs = argparse.Namespace(stt_delay=0.05, llm_delay=0.2, tts_delay=0.1,
                               tts_seconds_per_char=0.05, users=30, vad_stop_secs=0.2,
                               user_speech_timeout=0.6)  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="greeting-overlap-"))
    clips = [complete_clip(q, v) for q in QUESTIONS for v in VOICES]
    report: dict[str, Any] = {}
    stub = start_stub(knobs, ANSWER, "")
    ear = ClipEar()
    stub.config.transcriber = ear
    try:
        for variant in args.variants.split(","):
            if variant not in VARIANTS:
                raise SystemExit(f"unknown variant {variant!r}: {', '.join(VARIANTS)}")
            log = folder / f"{variant}.log"
            server = start_target("parley", knobs, stub, log, server_env(variant, args))
            try:
                for users in (int(u) for u in args.users.split(",")):
                    result = asyncio.run(
                        run_variant(server, ear, clips, folder, users, args, variant)
                    )
                    report[f"{variant}@{users}"] = result
                    print(variant, users, json.dumps(result), flush=True)
            finally:
                server.stop()
    finally:
        stub.stop()
    print(f"\nstart: {args.start}, tts: {args.tts}, stt: {args.stt}, echo: {args.echo}\n")
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(f"\nlogs: {folder}")


if __name__ == "__main__":
    main()
