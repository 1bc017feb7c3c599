"""When a tool call starts, relative to the spoken preamble it came with, and the silence
after the preamble before the answer that uses the tool's result.

One conversation on the real paced track (read in real time), its LLM and TTS the
OpenAI-compatible services against the stub on 127.0.0.1; a real tool runner. The stub
answers "preamble + tool call" (the preamble about ``--preamble`` seconds of speech at
0.07 s per character, about a real voice's pace), the tool takes ``--tool`` seconds,
then the stub answers with one sentence. Printed, median / p95 over ``-n`` runs:

- ``start_after_llm``: the call's start minus the end of the LLM stream that asked for it;
- ``start_after_audio``: the call's start minus the preamble's first audio;
- ``dead_air``: the preamble's last audio → the answer's first audio (what the user
  waits through in silence).

    .venv/bin/python -m bench.tool_timing [-n 5] [--preamble 2.5] [--tool 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from pipeline.events import BotStartedSpeaking, BotStoppedSpeaking, LLMResponseEnded
from pipeline.tools.registry import ToolCall, ToolRegistry
from pipeline.tools.runner import ToolRunner
from testkit.conversation_call import Call
from testkit.openai_stub import ChatReply, OpenAIStub
from testkit.openai_stub import ToolCall as ScriptedCall

SECONDS_PER_CHAR = 0.07


def preamble(seconds: float) -> str:
    words = "let me look that up for you while I check the records"
    text = words
    while len(text) * SECONDS_PER_CHAR < seconds:
        text += " " + words
    return text.capitalize() + "."


async def one_run(stub: OpenAIStub, text: str, tool_seconds: float) -> dict[str, float]:
    registry = ToolRegistry()
    started: list[float] = []

    @registry.tool()
    async def lookup(city: str, *, call: ToolCall) -> str:
        """Look up the weather."""
        started.append(time.monotonic())
        await asyncio.sleep(tool_seconds)
        return f"sunny in {city}"

    stub.script_chat(
        ChatReply(text, tool_calls=(ScriptedCall("lookup", {"city": "Oslo"}),)),
        "It is sunny in Oslo.",
    )
    llm_ends: list[float] = []
    async with Call(stub) as call:
        call.context.set_tools(registry.openai_tools())
        runner = ToolRunner(registry, call.conv.feed)
        runner.attach(call.conv.events)
        call.conv.events.on(LLMResponseEnded, lambda _: llm_ends.append(time.monotonic()))
        call.conv.user.add_text("What is the weather in Oslo?")
        await call.until(BotStartedSpeaking, count=2, within=30)
        await runner.close()
    starts = [e.t for e in call.seen if isinstance(e, BotStartedSpeaking)]
    stops = [e.t for e in call.seen if isinstance(e, BotStoppedSpeaking)]
    return {
        "start_after_llm": started[0] - llm_ends[0],
        "start_after_audio": started[0] - starts[0],
        "dead_air": starts[1] - stops[0],
    }


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"median {statistics.median(values):7.3f} s   p95 {p95:7.3f} s"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5)
    parser.add_argument("--preamble", type=float, default=2.5, help="seconds of speech")
    parser.add_argument("--tool", type=float, default=1.0, help="seconds the tool takes")
    args = parser.parse_args()
    text = preamble(args.preamble)
    runs: list[dict[str, float]] = []
    with OpenAIStub() as stub:
        stub.config.tts_seconds_per_char = SECONDS_PER_CHAR
        for _ in range(args.n):
            stub.reset()
            stub.config.tts_seconds_per_char = SECONDS_PER_CHAR
            runs.append(await one_run(stub, text, args.tool))
    seconds = len(text) * SECONDS_PER_CHAR
    print(f"preamble {seconds:.2f} s of speech, tool {args.tool:.2f} s, {args.n} runs")
    for key in ("start_after_llm", "start_after_audio", "dead_air"):
        print(f"  {key:<18} {summary([r[key] for r in runs])}")


if __name__ == "__main__":
    asyncio.run(main())
