"""What OpenTelemetry costs: the server's CPU per call with tracing on and off.

Starts the OpenAI-compatible stub, a local OTLP/HTTP receiver and two Parley servers with
every model at the stub: one with ``OTEL_EXPORTER_OTLP_ENDPOINT`` at the receiver (traces
and metrics, the batch processor's default delay), one without. Then, in rounds that
alternate between them, one call at a time over the plain-PCM WebSocket: a spoken
question, answered after a tool call (the most spans a turn makes), then a hang-up. The
server's CPU time (user + system, from ``/proc/<pid>/stat``: every thread, the SDK's
export thread included) is read before and after each call. Prints the median and p95
CPU per call for each, the difference of the medians and the spans the receiver got.

That CPU is read in clock ticks (10 ms) and a call costs hundreds of them, mostly the VAD:
the tracer's share is below the noise. So the observer is also timed alone, in this
process: one call's events (two turns, a tool call) replayed into a real
:class:`~server.ops.tracing.Tracing` exporting to the receiver, its CPU (``process_time``:
the SDK's export thread included) against the same replay with no observer.

    .venv/bin/python -m bench.tracing_overhead [--calls 10] [--replays 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from pipeline.events import (
    AssistantTranscript,
    BotResponseEnded,
    BotStartedSpeaking,
    Emitter,
    Event,
    FunctionCall,
    FunctionCallResult,
    FunctionCallsStarted,
    LLMResponseEnded,
    LLMResponseStarted,
    LLMText,
    Metric,
    SpeechStopped,
    Transcription,
    TTSStarted,
    TTSStopped,
    TurnEndScore,
    UserTranscript,
    UserTurnStarted,
    UserTurnStopped,
)
from pipeline.messages import Usage
from server.ops.tracing import start_tracing
from server.session.session import Session
from testkit.openai_stub import ChatReply, OpenAIStub, ToolCall
from testkit.otlp_receiver import OTLPReceiver, otlp_receiver
from testkit.server_process import ROOT, ServerProcess
from testkit.socket_callers import PcmCaller
from testkit.speech import espeak

AGENT = ROOT / "tests" / "agent_files" / "weather_desk.py"
QUESTION = "What is the weather in Paris?"
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, all its threads, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def start(stub: OpenAIStub, otel: dict[str, str], folder: Path) -> ServerProcess:
    settings = stub.server_settings(agent=str(AGENT), preload_models="true")
    env = {f"PARLEY_{k.upper()}": v for k, v in settings.items()} | otel
    folder.mkdir()
    server = ServerProcess(env, folder / "server.log")
    server.wait_models_ready(120)
    return server


def quiet(types: list[str]) -> bool:
    """The bot's last word on speaking was that it stopped."""
    said = [t for t in types if t in ("bot-started-speaking", "bot-stopped-speaking")]
    return bool(said) and said[-1] == "bot-stopped-speaking"


async def one_call(stub: OpenAIStub, server: ServerProcess) -> None:
    stub.reset()
    stub.config.transcript = QUESTION
    weather = ToolCall("get_weather", {"city": "Paris"})
    stub.script_chat(ChatReply(text="Let me look.", tool_calls=(weather,)), "It is sunny.")
    caller = PcmCaller(server.url.replace("http://", "ws://") + "/ws")
    async with caller:
        await caller.ready()
        await caller.wait_for(lambda: "bot-ready" in caller.event_types(), within=10)
        caller.say(espeak(QUESTION))
        await caller.wait_for(lambda: caller.event_types().count("bot-llm-stopped") >= 2, 30)
        await caller.wait_for(lambda: quiet(caller.event_types()), within=10)
    await asyncio.sleep(1.0)  # the session closed, the batch exported (its 5 s delay aside)


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"median_ms": statistics.median(ordered) * 1000, "p95_ms": p95 * 1000}


async def rounds(
    stub: OpenAIStub, servers: dict[str, ServerProcess], calls: int
) -> dict[str, list[float]]:
    cpu: dict[str, list[float]] = {name: [] for name in servers}
    for server in servers.values():  # a warm-up call each: lazy imports, pools
        await one_call(stub, server)
    for _ in range(calls):
        for name, server in servers.items():
            before = cpu_seconds(server.proc.pid)
            try:
                await one_call(stub, server)
            except TimeoutError:
                print(f"a call to the server with tracing {name} was not answered: not counted")
                continue
            cpu[name].append(cpu_seconds(server.proc.pid) - before)
    return cpu


def measure(calls: int) -> dict[str, object]:
    with OpenAIStub() as stub, otlp_receiver() as receiver, tempfile.TemporaryDirectory() as tmp:
        servers = {
            "off": start(stub, {}, Path(tmp) / "off"),
            "on": start(stub, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}, Path(tmp) / "on"),
        }
        try:
            cpu = asyncio.run(rounds(stub, servers, calls))
        finally:
            for server in servers.values():
                server.stop()
        return report(cpu, receiver, calls)


def report(cpu: dict[str, list[float]], receiver: OTLPReceiver, calls: int) -> dict[str, object]:
    off, on = stats(cpu["off"]), stats(cpu["on"])
    return {
        "calls": calls,
        "cpu_per_call_off": off,
        "cpu_per_call_on": on,
        "median_difference_ms": on["median_ms"] - off["median_ms"],
        "spans_received": len(receiver.spans()),
        "spans_per_call": len(receiver.spans()) / (calls + 1),
    }


def call_events(t: float) -> list[Event]:
    """What one call's conversation emits: a spoken question, a tool call, two answers."""
    usage = Usage(input_tokens=120, output_tokens=12)
    call = FunctionCall("call_1", "get_weather", {"city": "Paris"})

    def answer(text: str, reason: str, tools: list[Event]) -> list[Event]:
        return [
            LLMResponseStarted(), Metric("llm", "ttfb", 0.2, "m"), LLMText(text),
            Metric("llm", "tokens", usage, "m"), LLMResponseEnded(usage, reason), *tools,
            TTSStarted(), Metric("tts", "characters", len(text), "v"),
            Metric("tts", "ttfb", 0.02, "v"), BotStartedSpeaking(t + 2.5), TTSStopped(),
            BotResponseEnded(), AssistantTranscript(text, False, "now"),
        ]  # fmt: skip

    return [
        UserTurnStarted(t, "vad"), SpeechStopped(t + 1.5), TurnEndScore(t + 1.6, 0.9, t + 1.5),
        Transcription(QUESTION, t + 1.6), Metric("stt", "ttfb", 0.03),
        Metric("stt", "processing", 0.03), UserTurnStopped(t + 2.1, "adaptive"),
        UserTranscript(QUESTION, "now"),
        *answer("Let me look.", "tool_calls", [FunctionCallsStarted((call,))]),
        FunctionCallResult("call_1", "get_weather", {"forecast": "sunny"}),
        *answer("It is sunny.", "stop", []),
    ]  # fmt: skip


def replay_cpu(receiver: OTLPReceiver, replays: int, traced: bool) -> tuple[float, float]:
    """CPU seconds per replayed call, with the observer (and export) or without: of this
    thread (what a server's event loop would pay) and of the process (the SDK's export
    thread and this process's receiver decoding it too: an upper bound)."""
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url  # what the exporters read
    os.environ["OTEL_BSP_MAX_QUEUE_SIZE"] = str(20 * replays)  # nothing dropped
    tracing = start_tracing(False, os.environ) if traced else None
    thread, process = time.thread_time(), time.process_time()
    for i in range(replays):
        events = Emitter()
        conversation = SimpleNamespace(events=events)
        session: Any = SimpleNamespace(
            pc_id=f"call-{i}", transport=SimpleNamespace(kind="websocket"),
            voice=SimpleNamespace(conversation=conversation), close_reason="the client hung up",
        )  # fmt: skip
        if tracing is not None:
            tracing.session_opened(cast(Session, session))
        for event in call_events(time.monotonic() - 3.0):
            events.emit(event)
        if tracing is not None:
            tracing.session_closed(cast(Session, session))
    thread = time.thread_time() - thread
    if tracing is not None:
        tracing.shutdown()  # every span exported before the clock stops
    return thread / replays, (time.process_time() - process) / replays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10, help="calls per server (after one each)")
    parser.add_argument("--replays", type=int, default=2000, help="calls replayed in-process")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    result = measure(args.calls) if args.calls else {}
    with otlp_receiver() as receiver:
        bare = replay_cpu(receiver, args.replays, traced=False)
        traced = replay_cpu(receiver, args.replays, traced=True)
        result["replay"] = {
            "replays": args.replays,
            "loop_thread_us_per_call": (traced[0] - bare[0]) * 1e6,
            "process_us_per_call": (traced[1] - bare[1]) * 1e6,
            "spans_received": len(receiver.spans()),
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    replay = result["replay"]
    assert isinstance(replay, dict)
    print(f"{args.replays} calls replayed in-process "
          f"({replay['spans_received'] / args.replays:.0f} spans a call): the observer costs "
          f"{replay['loop_thread_us_per_call']:.0f} µs of the loop's thread a call, "
          f"{replay['process_us_per_call']:.0f} µs with the export and its decoding")  # fmt: skip
    if not args.calls:
        return
    print(f"{args.calls} calls per server (a spoken question, a tool call, two answers)")
    for mode in ("off", "on"):
        figures = result[f"cpu_per_call_{mode}"]
        assert isinstance(figures, dict)
        print(f"  tracing {mode:3}: CPU per call median {figures['median_ms']:.0f} ms, "
              f"p95 {figures['p95_ms']:.0f} ms")  # fmt: skip
    print(f"  difference of the medians: {result['median_difference_ms']:+.0f} ms")
    print(f"  spans received: {result['spans_received']} ({result['spans_per_call']:.0f} a call)")


if __name__ == "__main__":
    main()
