"""Load: N concurrent users, K turns each, against a server whose models are the stub.

Starts the OpenAI-compatible stub in a process of its own (fixed STT / LLM / TTS delays) and a
Parley server on 127.0.0.1 with every service at it, then runs N aiortc test clients
as asyncio tasks. Each connects (offer → ``bot-ready``), then speaks K questions in real
time and waits for each answer to end. Every Mth turn it barges in while the bot speaks.

Per turn: voice-to-voice at the client (end of speech → first loud frame), server-added
latency (that minus the VAD stop window and the stub's delays), barge-in latency (speech
onset → bot audio silent), and the pacing of the bot's audio frames. The server's CPU and
RSS are sampled from /proc every 0.5 s. Prints JSON and a Markdown table.

    .venv/bin/python -m bench.load --users 5 --turns 3 --barge-in-every 3 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testkit.measure import (
    ProcSampler,
    log_problems,
    loop_lag,
    pacing,
    speech_seconds,
    start_profiler,
    stats,
)
from testkit.plain_rtc_client import PlainRTCClient
from testkit.rtc_client import RTCTestClient
from testkit.server_process import ServerProcess, metric
from testkit.speech import make_speech
from testkit.targets import start_stub, start_target

QUESTIONS = [
    "What is two plus two?",
    "What color is the sky?",
    "Tell me a fun fact.",
    "How are you today?",
    "What day comes after Monday?",
]
BARGE = "Wait, stop. Tell me something else instead."
ANSWER = "Sure, here is a short answer for you. It has exactly two sentences in it."
BEFORE = 0.3  # seconds of silence before each utterance
AFTER = 0.3  # and after (the test mic sends silence in between anyway)
RMS = 200.0  # a received frame louder than this is bot speech
TURN_TIMEOUT = 30.0


@dataclass
class Utterance:
    """A speech WAV and where its speech starts and ends, in seconds from its start."""

    path: Path
    onset: float
    end: float


@dataclass
class UserResult:
    """What one simulated user measured (seconds)."""

    connect: float | None = None
    voice_to_voice: list[float] = field(default_factory=list)
    barge_in: list[float] = field(default_factory=list)
    barge_after_vad: list[float] = field(default_factory=list)
    after_barge: list[float] = field(default_factory=list)
    intervals: list[float] = field(default_factory=list)
    barge_missed: int = 0  # the bot had already stopped when the barge-in began
    # Per normal turn, when each stage's event reached the client, after the speech's end.
    stages: dict[str, list[float]] = field(default_factory=dict)
    error: str | None = None


# The events of a turn, in the order they come: the VAD's stop, the turn's end (its
# transcript), the LLM's first token, the TTS's first audio, the bot's first frame.
STAGES = ("user-stopped-speaking", "user-transcription", "bot-llm-started",
          "bot-tts-started", "bot-started-speaking")  # fmt: skip


def stage_times(client: RTCTestClient, end: float, result: UserResult) -> None:
    """When each of :data:`STAGES` first came after ``end`` (the first final transcript)."""
    for kind in STAGES:
        for at, msg in zip(client.arrivals, client.messages, strict=True):
            final = kind != "user-transcription" or (msg.get("data") or {}).get("final")
            if at > end and msg.get("type") == kind and final:
                result.stages.setdefault(kind, []).append(at - end)
                break


def utterance(folder: Path, name: str, text: str) -> Utterance:
    """Make an espeak WAV with known silence around the speech."""
    wav = make_speech(folder, name, text, BEFORE, AFTER)
    return Utterance(wav, BEFORE, speech_seconds(wav) - AFTER)


def first_loud(client: RTCTestClient, since: float) -> float | None:
    """Arrival time of the first loud received frame after ``since``."""
    return next((t for t, rms in client.audio.frames if t > since and rms > RMS), None)


def window_intervals(client: RTCTestClient, start: float, end: float) -> list[float]:
    """Inter-arrival intervals of every received frame between ``start`` and ``end``."""
    times = [t for t, _ in client.audio.frames if start <= t <= end]
    return [b - a for a, b in itertools.pairwise(times)]


def last_loud(client: RTCTestClient, start: float) -> float:
    """Arrival time of the last loud frame after ``start`` (``start`` if none)."""
    return max((t for t, rms in client.audio.frames if t >= start and rms > RMS), default=start)


async def wait_until(predicate: Any, what: str, within: float = TURN_TIMEOUT) -> Any:
    """Poll ``predicate`` every 20 ms until it returns something truthy."""
    deadline = time.monotonic() + within
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: nothing within {within} s")
        await asyncio.sleep(0.02)
    return value


def vad_confirmed(client: RTCTestClient, since: float) -> float | None:
    """Arrival of the first ``user-started-speaking`` after ``since``: the server's VAD
    has confirmed speech (the message takes well under a millisecond on 127.0.0.1)."""
    pairs = zip(client.arrivals, client.messages, strict=True)
    return next(
        (t for t, m in pairs if t > since and m.get("type") == "user-started-speaking"), None
    )


def stopped(client: RTCTestClient) -> int:
    return client.types().count("bot-stopped-speaking")


async def normal_turn(client: RTCTestClient, q: Utterance, result: UserResult) -> None:
    """Speak, wait for the whole answer; record voice-to-voice and pacing."""
    before = stopped(client)
    end = client.play(str(q.path)) + q.end
    await wait_until(lambda: stopped(client) > before, "bot-stopped-speaking")
    await asyncio.sleep(0.3)  # let the last frames arrive
    first = first_loud(client, end)
    if first is None:
        raise RuntimeError("the answer had no loud audio")
    result.voice_to_voice.append(first - end)
    result.intervals += window_intervals(client, first, last_loud(client, first))
    stage_times(client, end, result)


async def barge_turn(
    client: RTCTestClient, q: Utterance, barge: Utterance, delay: float, result: UserResult
) -> None:
    """Speak, barge in ``delay`` s into the answer; record both latencies."""
    before = stopped(client)
    end = client.play(str(q.path)) + q.end
    first = await wait_until(lambda: first_loud(client, end), "first bot audio")
    result.voice_to_voice.append(first - end)
    await asyncio.sleep(delay)
    started = client.play(str(barge.path))
    onset, barge_end = started + barge.onset, started + barge.end
    await asyncio.sleep(max(0.0, onset - time.monotonic()))
    if stopped(client) > before:  # the answer ended before the barge-in began
        result.barge_missed += 1
    else:
        silent = await wait_until(lambda: client.silent_since(onset, RMS), "silence", 10)
        result.barge_in.append(silent - onset)
        confirmed = vad_confirmed(client, onset)
        if confirmed is not None:
            result.barge_after_vad.append(silent - confirmed)
        result.intervals += window_intervals(client, first, silent)
    # The interrupted answer stops, then the answer to the barge-in stops.
    await wait_until(lambda: stopped(client) >= before + 2, "answer to the barge-in")
    await asyncio.sleep(0.3)
    after = first_loud(client, barge_end)
    if after is not None:
        result.after_barge.append(after - barge_end)
        result.intervals += window_intervals(client, after, last_loud(client, after))


async def user(
    url: str, index: int, args: argparse.Namespace, qs: list[Utterance], barge: Utterance
) -> UserResult:
    """One simulated user: connect, then ``args.turns`` turns."""
    result = UserResult()
    await asyncio.sleep(index * args.stagger)
    kind = PlainRTCClient if args.client == "plain" else RTCTestClient
    client = kind(url, jitter_frames=args.client_jitter_frames)
    try:
        result.connect = await client.connect()
        await asyncio.sleep(0.5)
        for turn in range(args.turns):
            q = qs[(index + turn) % len(qs)]
            if args.barge_in_every and (turn + 1) % args.barge_in_every == 0:
                await barge_turn(client, q, barge, args.barge_in_delay, result)
            else:
                await normal_turn(client, q, result)
            await asyncio.sleep(args.pause)
    except Exception as exc:  # one user's failure is a result, not a crash
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        await client.close()
    return result


async def run_users(
    url: str, args: argparse.Namespace, qs: list[Utterance], barge: Utterance
) -> list[UserResult]:
    """All users concurrently, bounded by ``args.timeout`` seconds overall."""
    tasks = [asyncio.ensure_future(user(url, i, args, qs, barge)) for i in range(args.users)]
    done, pending = await asyncio.wait(tasks, timeout=args.timeout)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    results = []
    for task in tasks:
        if task in done and task.exception() is None:
            results.append(task.result())
        else:
            results.append(UserResult(error=f"timed out after {args.timeout} s"))
    return results


def aggregate(
    results: list[UserResult], args: argparse.Namespace, sampler: ProcSampler
) -> dict[str, Any]:
    """Every user's samples pooled into one summary."""
    vad_window = args.vad_stop_secs + args.user_speech_timeout
    # STT is counted as the server's own time: it is on the critical path whenever it is
    # slower than the stop window, and a real STT often is.
    stub = args.llm_delay + args.tts_delay
    v2v = [v for r in results for v in r.voice_to_voice]
    return {
        "client_jitter_frames": args.client_jitter_frames,
        "users": args.users,
        "turns": args.turns,
        "barge_in_every": args.barge_in_every,
        "bot_voice": getattr(args, "bot_voice", "buzz"),
        "stub_delays_ms": {
            "stt": args.stt_delay * 1000,
            "llm_first_token": args.llm_delay * 1000,
            "tts_first_audio": args.tts_delay * 1000,
        },
        "vad_window_ms": round(1000 * vad_window, 1),
        "connect": stats([r.connect for r in results if r.connect is not None]),
        "voice_to_voice": stats(v2v),
        "stages": {k: stats([v for r in results for v in r.stages.get(k, [])]) for k in STAGES},
        "server_added": stats([v - vad_window - stub for v in v2v]),
        "barge_in": stats([v for r in results for v in r.barge_in]),
        "barge_in_after_vad": stats([v for r in results for v in r.barge_after_vad]),
        "after_barge_voice_to_voice": stats([v for r in results for v in r.after_barge]),
        "barge_in_missed": sum(r.barge_missed for r in results),
        "pacing": pacing([v for r in results for v in r.intervals]),
        "server": sampler.summary(args.users),
        "user_errors": [r.error for r in results if r.error],
    }


def markdown(summary: dict[str, Any]) -> str:
    """The summary as Markdown tables."""
    out = [
        f"target={summary['target']} users={summary['users']} turns={summary['turns']} "
        f"barge_in_every={summary['barge_in_every']} run={summary['run_seconds']} s",
        "",
        "| metric | n | p50 ms | p95 ms | max ms |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key in ("connect", "voice_to_voice", "server_added", "barge_in", "barge_in_after_vad",
                "after_barge_voice_to_voice"):  # fmt: skip
        row = summary[key]
        cells = [str(row.get(k, "-")) for k in ("n", "p50_ms", "p95_ms", "max_ms")]
        out.append(f"| {key} | {' | '.join(cells)} |")
    out += ["", "| stage (after the speech's end) | n | p50 ms | p95 ms | max ms |",
            "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for kind, row in summary["stages"].items():
        cells = [str(row.get(k, "-")) for k in ("n", "p50_ms", "p95_ms", "max_ms")]
        out.append(f"| {kind} | {' | '.join(cells)} |")
    p = summary["pacing"]
    out += [
        "",
        "| pacing intervals | median ms | p95 ms | max jitter ms | gaps > 60 ms |",
        "| --- | --- | --- | --- | --- |",
        f"| {p['n']} | {p.get('median_ms', '-')} | {p.get('p95_ms', '-')} "
        f"| {p.get('max_jitter_ms', '-')} | {p.get('gaps_over_60ms', '-')} |",
    ]
    s = summary["server"]
    out += [
        "",
        "| server CPU mean % | CPU max % | RSS max MB | CPU %/session | RSS MB/session "
        "| RSS growth MB/session |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {s.get('cpu_mean_pct', '-')} | {s.get('cpu_max_pct', '-')} "
        f"| {s.get('rss_max_mb', '-')} | {s.get('cpu_mean_pct_per_session', '-')} "
        f"| {s.get('rss_max_mb_per_session', '-')} | {s.get('rss_growth_mb_per_session', '-')} |",
    ]
    log = summary["server_log"]
    out += ["", f"user errors: {len(summary['user_errors'])}; server log: {log['errors']} "
            f"error lines, {log['warnings']} warnings; barge-ins missed: "
            f"{summary['barge_in_missed']}"]  # fmt: skip
    lag = summary.get("event_loop_lag") or {}
    if lag.get("samples"):
        out.append(f"event-loop lag ({lag['samples']} probes): mean {lag['mean_ms']} ms, "
                   f"95 % under {lag['p95_under_ms']} ms, worst of the last 10 s "
                   f"{lag['recent_max_ms']} ms")  # fmt: skip
    return "\n".join(out)


# The figures compared between the two targets: (section, key).
COMPARED = [
    ("connect", "p50_ms"), ("server_added", "p50_ms"), ("server_added", "p95_ms"),
    ("barge_in", "p50_ms"), ("barge_in_after_vad", "p50_ms"),
    ("server", "cpu_mean_pct_per_session"), ("server", "rss_max_mb"),
    ("server", "rss_growth_mb_per_session"),
]  # fmt: skip


def ratios(parley: dict[str, Any], pipecat: dict[str, Any]) -> dict[str, Any]:
    """Parley / Pipecat for each compared figure (None where either is missing or 0)."""
    out: dict[str, Any] = {}
    for section, key in COMPARED:
        a, b = parley[section].get(key), pipecat[section].get(key)
        out[f"{section}.{key}"] = {
            "parley": a,
            "pipecat": b,
            "ratio": round(a / b, 2) if a is not None and b else None,
        }
    return out


def ratio_table(rows: dict[str, Any]) -> str:
    """The comparison as a Markdown table."""
    out = ["| figure | Parley | Pipecat | Parley/Pipecat |", "| --- | --- | --- | --- |"]
    for name, row in rows.items():
        out.append(f"| {name} | {row['parley']} | {row['pipecat']} | {row['ratio']} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=5)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--barge-in-every", type=int, default=3, help="0 = never")
    parser.add_argument("--barge-in-delay", type=float, default=0.5,
                        help="seconds into the answer to barge in")  # fmt: skip
    parser.add_argument("--stt-delay", type=float, default=0.1)
    parser.add_argument("--llm-delay", type=float, default=0.2)
    parser.add_argument("--tts-delay", type=float, default=0.1)
    parser.add_argument("--tts-seconds-per-char", type=float, default=0.06,
                        help="stub speech length; 0.06 s is about a human rate")  # fmt: skip
    parser.add_argument("--bot-voice", choices=("speech", "buzz", "tone"), default="speech",
                        help="what the stub's TTS says: a recorded voice, the buzz the "
                             "benches used before (VOIP coded it at half the CPU), or a "
                             "steady 220 Hz tone")  # fmt: skip
    parser.add_argument("--question", help="every user says this at every turn (the ends "
                        "of their turns then come together, --stagger apart)")  # fmt: skip
    parser.add_argument("--pause", type=float, default=0.5,
                        help="seconds of silence after an answer before the next turn")  # fmt: skip
    parser.add_argument("--vad-stop-secs", type=float, default=0.2)
    parser.add_argument("--user-speech-timeout", type=float, default=0.6)
    parser.add_argument("--stagger", type=float, default=0.25, help="s between user starts")
    parser.add_argument("--timeout", type=float, default=300.0, help="overall, seconds")
    parser.add_argument("--log", type=Path, help="server log (default: a temp file)")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--profile", type=Path,
                        help="py-spy (on PATH) records the server into this file")  # fmt: skip
    parser.add_argument("--target", choices=("parley", "pipecat", "both"), default="parley",
                        help="server under test (pipecat: bench/pipecat/bot.py; both: one "
                        "after the other, with ratios Parley/Pipecat)")  # fmt: skip
    parser.add_argument("--stub-thread", action="store_true",
                        help="run the stub in this process, as before issue 24 (its delays "
                        "then stretch with the load generator's)")  # fmt: skip
    parser.add_argument("--client-jitter-frames", type=int, default=1,
                        help="packets each client's jitter buffer holds (aiortc: 4)")  # fmt: skip
    parser.add_argument("--client", choices=("test", "plain"), default="test",
                        help="test: the repository's client (codes as a browser does, "
                        "decodes at 16 kHz); plain: aiortc's own encoder and decoder, as a "
                        "new user's aiortc client (testkit/plain_rtc_client.py)")  # fmt: skip
    parser.add_argument("--transcript", help="what the stub STT hears (default: "
                        "'what is two plus two', whatever is said)")  # fmt: skip
    parser.add_argument("--turn-end", choices=("fixed", "adaptive"), default="fixed",
                        help="Parley's turn end: the fixed window (the bench's figures since "
                        "issue 8) or the default, adaptive (the end-of-turn model at every "
                        "pause)")  # fmt: skip
    args = parser.parse_args()
    if not 1 <= args.users <= 50 or not 1 <= args.turns <= 50:
        parser.error("--users and --turns must be within 1..50")
    folder = Path(tempfile.mkdtemp(prefix="parley-load-"))
    texts = [args.question] if args.question else QUESTIONS
    qs = [utterance(folder, f"q{n}", text) for n, text in enumerate(texts)]
    barge = utterance(folder, "barge", BARGE)
    runs = [
        run_target(target, args, qs, barge, folder)
        for target in (("parley", "pipecat") if args.target == "both" else (args.target,))
    ]
    result: dict[str, Any] = runs[0] if len(runs) == 1 else {"runs": runs, "ratios": ratios(*runs)}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    for run in runs:
        print()
        print(markdown(run))
    if len(runs) == 2:
        print()
        print(ratio_table(result["ratios"]))


def server_work(server: ServerProcess) -> dict[str, float]:
    """What the server did for the run, from /metrics: end-of-turn model inferences and
    their seconds (one core each), STT requests, LLM runs."""
    inference = 'parley_turn_model_seconds_{}{{stage="inference"}}'
    queued = 'parley_turn_model_seconds_{}{{stage="queue"}}'
    count = metric(server, queued.format("count"))
    return {
        "turn_model_inferences": metric(server, inference.format("count")),
        "turn_model_seconds": round(metric(server, inference.format("sum")), 2),
        "turn_model_queued_mean_ms": round(1000 * metric(server, queued.format("sum")) / count, 1)
        if count
        else None,
    }


def run_target(
    target: str, args: argparse.Namespace, qs: list[Utterance], barge: Utterance, folder: Path
) -> dict[str, Any]:
    """One whole run against ``target``; its summary."""
    log_path = args.log or folder / f"{target}.log"
    stub = server = sampler = profiler = None
    try:
        heard = args.transcript or "what is two plus two"
        stub = start_stub(args, ANSWER, heard, process=not args.stub_thread)
        server = start_target(target, args, stub, log_path)
        sampler = ProcSampler(server.proc.pid).start()
        if args.profile:
            profiler = start_profiler(server.proc.pid, args.profile.with_suffix(f".{target}.json"))
        started = time.monotonic()
        results = asyncio.run(run_users(server.url, args, qs, barge))
        run_seconds = time.monotonic() - started
        lag = loop_lag(server.url) if target == "parley" else {}
        work = server_work(server) if target == "parley" else {}
    finally:
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(30)
        if sampler is not None:
            sampler.stop()
        if server is not None:
            server.stop()
        if stub is not None:
            stub.stop()
    summary = aggregate(results, args, sampler)
    summary["target"] = target
    summary["run_seconds"] = round(run_seconds, 1)
    summary["event_loop_lag"] = lag
    summary["server_work"] = work
    summary["server_log"] = log_problems(log_path.read_text()) | {"path": str(log_path)}
    return summary


if __name__ == "__main__":
    main()
