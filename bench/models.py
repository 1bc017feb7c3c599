"""Speed of the embedded models on this machine, through the services the server uses.

STT: latency and real-time factor (latency / audio length) for a ~3 s espeak-ng
utterance. LLM: time to first token and decode speed for short spoken answers (the
question changes per round, so the prompt is read each time; the system prompt stays
cached, as in a conversation). TTS: time to first audio and real-time factor for one
sentence. Load and warm-up times come from the registry. Rounds run the three cases in
turn (the box is shared and its speed drifts); medians and p95s are printed as Markdown.
If ``bench/stub_overhead.py`` is present, its client-overhead table follows.

    .venv/bin/python -m bench.models [-n 7] [--stub-rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from contextlib import aclosing
from pathlib import Path

from pipeline.services.embedded import EmbeddedModels
from pipeline.services.llm import TextDelta, UsageReport
from pipeline.services.local_llm import LocalLLM
from pipeline.services.local_stt import LocalSTT
from pipeline.services.local_tts import LocalTTS
from testkit.speech import espeak

UTTERANCE = "Please tell me a short story about a friendly dragon."  # ~3.0 s in espeak-ng
SYSTEM = "You are a helpful voice assistant. Answer in one or two short sentences."
QUESTIONS = (
    "What can I cook for dinner tonight?",
    "How do I keep my houseplants alive?",
    "What is a good way to start running?",
    "Why is the sky blue?",
    "How can I sleep better at night?",
    "What should I pack for a weekend trip?",
    "How do bees make honey?",
)
SENTENCE = "Sure, I can help you plan a simple dinner with pasta and fresh vegetables tonight."


def stats(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Results:
    def __init__(self) -> None:
        self.values: dict[tuple[str, str], list[float]] = {}

    def add(self, model: str, measure: str, value: float) -> None:
        self.values.setdefault((model, measure), []).append(value)

    def table(self) -> str:
        lines = ["| model | measure | median | p95 | n |", "| --- | --- | ---: | ---: | ---: |"]
        for (model, measure), values in self.values.items():
            median, p95 = stats(values)
            lines.append(f"| {model} | {measure} | {median:.3f} | {p95:.3f} | {len(values)} |")
        return "\n".join(lines)


async def stt_round(stt: LocalSTT, audio, seconds: float, results: Results) -> None:
    started = time.perf_counter()
    await stt.transcribe(audio)
    latency = time.perf_counter() - started
    results.add("STT whisper tiny.en", f"latency, {seconds:.1f} s utterance (s)", latency)
    results.add("STT whisper tiny.en", "real-time factor", latency / seconds)


async def llm_round(models: EmbeddedModels, question: str, results: Results) -> None:
    llm = LocalLLM(models)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    started = time.perf_counter()
    first = end = 0.0
    tokens = 0
    async with aclosing(llm.stream(messages)) as chunks:
        async for chunk in chunks:
            if isinstance(chunk, TextDelta) and not first:
                first = time.perf_counter()
            elif isinstance(chunk, UsageReport):
                tokens = chunk.usage.output_tokens
    end = time.perf_counter()
    results.add("LLM SmolLM2-135M Q4_1", "time to first token (s)", first - started)
    if tokens > 1 and end > first:
        results.add("LLM SmolLM2-135M Q4_1", "decode tokens/s", (tokens - 1) / (end - first))


async def tts_round(tts: LocalTTS, results: Results) -> None:
    started = time.perf_counter()
    first = 0.0
    samples = 0
    async with aclosing(tts.synthesize(SENTENCE)) as audio:
        async for pcm in audio:
            first = first or time.perf_counter() - started
            samples += pcm.size
    elapsed = time.perf_counter() - started
    results.add("TTS hibari heart", "time to first audio (s)", first)
    results.add("TTS hibari heart", "real-time factor", elapsed / (samples / tts.sample_rate))


async def run(rounds: int) -> tuple[Results, EmbeddedModels, float]:
    models = EmbeddedModels()
    for model in models.models:  # one at a time, so each load time is its own
        await model.get()
    rss = rss_mib()
    audio = espeak(UTTERANCE)
    seconds = audio.size / 16000
    stt, tts = LocalSTT(models), LocalTTS(models)
    results = Results()
    for i in range(rounds):
        await stt_round(stt, audio, seconds, results)
        await llm_round(models, QUESTIONS[i % len(QUESTIONS)], results)
        await tts_round(tts, results)
    return results, models, rss


def load_table(models: EmbeddedModels, rss: float) -> str:
    lines = ["| model | load (s) | warm-up (s) |", "| --- | ---: | ---: |"]
    for role, status in models.status().items():
        lines.append(
            f"| {role}: {status['model']} | {status['load_seconds']:.2f} "
            f"| {status['warmup_seconds']:.2f} |"
        )
    lines.append(f"\nProcess RSS with all three loaded: {rss:.0f} MiB")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=7, help="measured rounds per case")
    parser.add_argument("--stub-rounds", type=int, default=20, help="rounds for stub_overhead")
    args = parser.parse_args()
    results, models, rss = asyncio.run(run(args.n))
    print("## Embedded models\n")
    print(load_table(models, rss))
    print()
    print(results.table())
    models.shutdown()
    try:
        from bench import stub_overhead
    except ImportError:
        return
    print("\n## OpenAI-compatible client overhead (stub)\n")
    print(stub_overhead.table(stub_overhead.measure(args.stub_rounds)))


if __name__ == "__main__":
    main()
