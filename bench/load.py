"""Load: N concurrent users, K turns each, against a server whose models are the stub.

Starts the OpenAI-compatible stub in this process (fixed STT / LLM / TTS delays) and a
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
import os
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.voice_latency import speech_seconds
from tests.conftest import ServerProcess, free_port, make_speech
from tests.openai_stub import OpenAIStub
from tests.rtc_client import RTCTestClient

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
FRAME = 0.020
GAP = 0.060
TURN_TIMEOUT = 30.0
ROOT = Path(__file__).resolve().parent.parent
PIPECAT_PYTHON = ROOT / "bench" / ".venv-pipecat" / "bin" / "python"
PIPECAT_BOT = ROOT / "bench" / "pipecat" / "bot.py"


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
    after_barge: list[float] = field(default_factory=list)
    intervals: list[float] = field(default_factory=list)
    barge_missed: int = 0  # the bot had already stopped when the barge-in began
    error: str | None = None


def utterance(folder: Path, name: str, text: str) -> Utterance:
    """Make an espeak WAV with known silence around the speech."""
    wav = make_speech(folder, name, text, BEFORE, AFTER)
    return Utterance(wav, BEFORE, speech_seconds(wav) - AFTER)


def stats(values: list[float]) -> dict[str, float]:
    """n, p50, p95, max in ms (n only when empty)."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "n": len(ordered),
        "p50_ms": round(1000 * statistics.median(ordered), 1),
        "p95_ms": round(1000 * p95, 1),
        "max_ms": round(1000 * ordered[-1], 1),
    }


def pacing(intervals: list[float]) -> dict[str, float]:
    """Inter-arrival of the bot's frames: median, p95, max |interval - 20 ms|, gaps."""
    if not intervals:
        return {"n": 0}
    ordered = sorted(intervals)
    return {
        "n": len(ordered),
        "median_ms": round(1000 * statistics.median(ordered), 2),
        "p95_ms": round(1000 * ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 2),
        "max_jitter_ms": round(1000 * max(abs(i - FRAME) for i in ordered), 1),
        "gaps_over_60ms": sum(1 for i in ordered if i > GAP),
    }


class ProcSampler:
    """CPU % (of one core) and RSS of a process, from /proc, every ``period`` s, in a thread."""

    def __init__(self, pid: int, period: float = 0.5) -> None:
        self.pid = pid
        self.period = period
        self.cpu: list[float] = []
        self.rss_mb: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="proc-sampler")
        self._tick = os.sysconf("SC_CLK_TCK")

    def _cpu_seconds(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self._tick  # utime, stime

    def _rss(self) -> float:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def _run(self) -> None:
        try:
            last_cpu, last_t = self._cpu_seconds(), time.monotonic()
            while not self._stop.wait(self.period):
                cpu, now = self._cpu_seconds(), time.monotonic()
                self.cpu.append(100 * (cpu - last_cpu) / (now - last_t))
                self.rss_mb.append(self._rss())
                last_cpu, last_t = cpu, now
        except (FileNotFoundError, ProcessLookupError):
            return  # the process ended

    def start(self) -> ProcSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    def summary(self, users: int) -> dict[str, float]:
        if not self.cpu:
            return {"samples": 0}
        mean_cpu = statistics.fmean(self.cpu)
        max_rss = max(self.rss_mb)
        return {
            "samples": len(self.cpu),
            "cpu_mean_pct": round(mean_cpu, 1),
            "cpu_max_pct": round(max(self.cpu), 1),
            "rss_max_mb": round(max_rss, 1),
            "rss_start_mb": round(self.rss_mb[0], 1),
            "cpu_mean_pct_per_session": round(mean_cpu / users, 1),
            "rss_max_mb_per_session": round(max_rss / users, 1),
            "rss_growth_mb_per_session": round((max_rss - self.rss_mb[0]) / users, 1),
        }


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
    client = RTCTestClient(url)
    try:
        result.connect = await client.connect()
        await asyncio.sleep(0.5)
        for turn in range(args.turns):
            q = qs[(index + turn) % len(qs)]
            if args.barge_in_every and (turn + 1) % args.barge_in_every == 0:
                await barge_turn(client, q, barge, args.barge_in_delay, result)
            else:
                await normal_turn(client, q, result)
            await asyncio.sleep(0.5)
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


class PipecatProcess(ServerProcess):
    """bench/pipecat/bot.py in its own venv (see bench/pipecat/README.md): started here,
    stopped (SIGTERM) and logged exactly like the Parley server."""

    def __init__(self, args: argparse.Namespace, base_url: str, api_key: str, log_path: Path):
        if not PIPECAT_PYTHON.exists():
            raise RuntimeError(f"{PIPECAT_PYTHON} missing: see bench/pipecat/README.md")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = log_path.open("w")
        cmd = [str(PIPECAT_PYTHON), str(PIPECAT_BOT), "--port", str(self.port),
               "--base-url", base_url, "--api-key", api_key,
               "--vad-stop-secs", str(args.vad_stop_secs),
               "--user-speech-timeout", str(args.user_speech_timeout)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pipecat bot exited at start:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"pipecat bot did not start:\n{self.log()}")


def log_problems(log: str) -> dict[str, Any]:
    """Counts and the first lines of errors and warnings in the server's log."""
    lines = log.splitlines()
    bad = [ln for ln in lines if any(w in ln for w in ("ERROR", "Traceback", "CRITICAL"))]
    warn = [ln for ln in lines if "WARNING" in ln]
    return {
        "errors": len(bad),
        "warnings": len(warn),
        "first_errors": bad[:10],
        "first_warnings": warn[:10],
    }


def aggregate(
    results: list[UserResult], args: argparse.Namespace, sampler: ProcSampler
) -> dict[str, Any]:
    """Every user's samples pooled into one summary."""
    vad_window = args.vad_stop_secs + args.user_speech_timeout
    stub = args.stt_delay + args.llm_delay + args.tts_delay
    v2v = [v for r in results for v in r.voice_to_voice]
    return {
        "target": args.target,
        "users": args.users,
        "turns": args.turns,
        "barge_in_every": args.barge_in_every,
        "stub_delays_ms": {
            "stt": args.stt_delay * 1000,
            "llm_first_token": args.llm_delay * 1000,
            "tts_first_audio": args.tts_delay * 1000,
        },
        "vad_window_ms": round(1000 * vad_window, 1),
        "connect": stats([r.connect for r in results if r.connect is not None]),
        "voice_to_voice": stats(v2v),
        "server_added": stats([v - vad_window - stub for v in v2v]),
        "barge_in": stats([v for r in results for v in r.barge_in]),
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
    for key in ("connect", "voice_to_voice", "server_added", "barge_in",
                "after_barge_voice_to_voice"):  # fmt: skip
        row = summary[key]
        cells = [str(row.get(k, "-")) for k in ("n", "p50_ms", "p95_ms", "max_ms")]
        out.append(f"| {key} | {' | '.join(cells)} |")
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
    parser.add_argument("--vad-stop-secs", type=float, default=0.2)
    parser.add_argument("--user-speech-timeout", type=float, default=0.6)
    parser.add_argument("--stagger", type=float, default=0.25, help="s between user starts")
    parser.add_argument("--timeout", type=float, default=300.0, help="overall, seconds")
    parser.add_argument("--log", type=Path, help="server log (default: a temp file)")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--target", choices=("parley", "pipecat"), default="parley",
                        help="server under test (pipecat: bench/pipecat/bot.py)")  # fmt: skip
    args = parser.parse_args()
    if not 1 <= args.users <= 50 or not 1 <= args.turns <= 50:
        parser.error("--users and --turns must be within 1..50")
    folder = Path(tempfile.mkdtemp(prefix="parley-load-"))
    qs = [utterance(folder, f"q{n}", text) for n, text in enumerate(QUESTIONS)]
    barge = utterance(folder, "barge", BARGE)
    log_path = args.log or folder / "server.log"
    stub = server = sampler = None
    try:
        stub = OpenAIStub().start()
        stub.config.stt_delay = args.stt_delay
        stub.config.first_token_delay = args.llm_delay
        stub.config.tts_first_audio_delay = args.tts_delay
        stub.config.tts_seconds_per_char = args.tts_seconds_per_char
        stub.config.default_text = ANSWER
        stub.config.transcript = "what is two plus two"
        env = {
            "PARLEY_LOG_LEVEL": "INFO", "PARLEY_PRELOAD_MODELS": "true", "PARLEY_GREETING": "",
            "PARLEY_STT": "openai", "PARLEY_LLM": "openai", "PARLEY_TTS": "openai",
            "PARLEY_OPENAI_BASE_URL": stub.base_url, "PARLEY_OPENAI_API_KEY": stub.api_key,
            "PARLEY_MAX_SESSIONS": str(max(args.users, 20)),
            "PARLEY_VAD_STOP_SECS": str(args.vad_stop_secs),
            "PARLEY_USER_SPEECH_TIMEOUT": str(args.user_speech_timeout),
        }  # fmt: skip
        if args.target == "pipecat":
            server = PipecatProcess(args, stub.base_url, stub.api_key, log_path)
        else:
            server = ServerProcess(env, log_path)
            server.wait_models_ready()
        sampler = ProcSampler(server.proc.pid).start()
        started = time.monotonic()
        results = asyncio.run(run_users(server.url, args, qs, barge))
        run_seconds = time.monotonic() - started
    finally:
        if sampler is not None:
            sampler.stop()
        if server is not None:
            server.stop()
        if stub is not None:
            stub.stop()
    summary = aggregate(results, args, sampler)
    summary["run_seconds"] = round(run_seconds, 1)
    summary["server_log"] = log_problems(log_path.read_text()) | {"path": str(log_path)}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    print()
    print(markdown(summary))


if __name__ == "__main__":
    main()
