"""Would a person keep talking to the embedded LLM? Usable answers and tool choice.

Runs each embedded LLM (``--models``, default: every choice) through the same service the
server uses (:class:`~pipeline.services.local_llm.LocalLLM`, the default system prompt,
content tool calls parsed as in a call) on two sets written for this bench, never used to
tune anything:

- **Everyday questions** (20): a question and what a usable spoken answer must contain
  (the fact, as a regular expression over the lower-cased answer). An answer is usable
  when it has the fact, calls no tool, and is speakable: no JSON, code fence or markdown,
  at most 60 words. The first 10 are the headline set (the issue's "9 of 10").
- **Tool choice** (10): the offered tools are a clock, a weather lookup, an order lookup
  and an appointment booker; 6 prompts need one (the right name counts), 4 need none
  (a plain answer counts).

Prints per model: usable answers, tools chosen right, each miss with its answer, time to
first token (p50/p95, the system prompt and tools in the cache after the first) and the
process RSS after loading.

    .venv/bin/python -m bench.embedded_quality [--models qwen2.5-1.5b smollm2-135m]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import re
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.services.embedded import EmbeddedModels
from pipeline.services.llm import TextDelta, ToolCallRequest
from pipeline.services.local_llm import LocalLLM
from server.settings import Settings
from testkit.measure import stats

QUESTIONS: tuple[tuple[str, str], ...] = (
    ("What is the capital of France?", r"paris"),
    ("How many legs does a spider have?", r"\b(8|eight)\b"),
    ("Who wrote Romeo and Juliet?", r"shakespeare"),
    ("What is two plus three times four?", r"\b(14|fourteen)\b"),
    ("How many days are there in a leap year?", r"\b(366|three hundred (and )?sixty[- ]six)\b"),
    ("At what temperature does water boil in Celsius?", r"\b(100|one hundred|hundred)\b"),
    ("Which planet is called the red planet?", r"\bmars\b"),
    ("How do you say thank you in Spanish?", r"gracias"),
    ("What is the largest ocean on Earth?", r"pacific"),
    (
        "Can you suggest something quick I could cook for dinner?",
        r"pasta|salad|stir|omelet|egg|rice|soup|sandwich|taco|chicken|noodle|quesadilla|wrap",
    ),
    ("Who painted the Mona Lisa?", r"leonardo|da vinci"),
    ("How many continents are there?", r"\b(7|seven)\b"),
    ("What is the square root of eighty-one?", r"\b(9|nine)\b"),
    ("What language do people speak in Brazil?", r"portuguese"),
    ("How many minutes are in an hour?", r"\b(60|sixty)\b"),
    ("What gas do plants take in from the air?", r"carbon dioxide|co2|co₂"),
    ("What is the freezing point of water in Fahrenheit?", r"\b(32|thirty[- ]two)\b"),
    ("Which is bigger, the sun or the moon?", r"\bsun\b"),
    (
        "What's a good way to fall asleep faster?",
        r"screen|routine|dark|relax|breath|caffeine|schedule|read|cool|quiet|meditat",
    ),
    ("How many sides does a hexagon have?", r"\b(6|six)\b"),
)
HEADLINE = 10

TOOL_PROMPTS: tuple[tuple[str, str | None], ...] = (
    ("What time is it right now?", "get_current_time"),
    ("What time is it in Tokyo at the moment?", "get_current_time"),
    ("What's the weather like in Berlin today?", "get_weather"),
    ("Is it going to rain in London this afternoon?", "get_weather"),
    ("Where is my order? The number is four five one two.", "check_order_status"),
    ("Can you book me a haircut on Friday at three in the afternoon?", "book_appointment"),
    ("What's the capital of Italy?", None),
    ("Tell me a short joke.", None),
    ("How many hours are in a day?", None),
    ("Thanks, that's all I needed.", None),
)


def _function(name: str, description: str, params: dict[str, str]) -> dict[str, Any]:
    properties = {p: {"type": "string", "description": d} for p, d in params.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(params)},
        },
    }


TOOLS = [
    _function(
        "get_current_time",
        "The current date and time in a time zone.",
        {"timezone": "IANA time zone, e.g. Europe/Paris; UTC if unknown"},
    ),
    _function("get_weather", "Today's weather forecast for a city.", {"city": "The city"}),
    _function(
        "check_order_status",
        "Where a customer's order is, by its order number.",
        {"order_id": "The order number"},
    ),
    _function(
        "book_appointment",
        "Book a salon appointment.",
        {"service": "What to book", "day": "The day", "time": "The time of day"},
    ),
]

_UNSPEAKABLE = re.compile(r"```|^\s*[{\[]|\*\*|^\s*[-*#] ", re.MULTILINE)


@dataclass
class Answer:
    text: str = ""
    tools: list[str] = field(default_factory=list)
    ttfb: float | None = None


async def ask(llm: LocalLLM, system: str, prompt: str, tools: list[dict[str, Any]]) -> Answer:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    answer = Answer()
    started = time.perf_counter()
    async with aclosing(llm.stream(messages, tools or None)) as chunks:
        async for chunk in chunks:
            if isinstance(chunk, TextDelta | ToolCallRequest) and answer.ttfb is None:
                answer.ttfb = time.perf_counter() - started
            if isinstance(chunk, TextDelta):
                answer.text += chunk.text
            elif isinstance(chunk, ToolCallRequest):
                answer.tools.append(chunk.name)
    return answer


def usable(answer: Answer, fact: str) -> bool:
    text = answer.text.strip()
    return (
        not answer.tools
        and bool(re.search(fact, text.lower()))
        and not _UNSPEAKABLE.search(text)
        and len(text.split()) <= 60
    )


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def run_model(name: str, model_dir: Path, system: str) -> dict[str, Any]:
    models = EmbeddedModels(llm=name, model_dir=model_dir)
    started = time.perf_counter()
    await models.llm.get()
    loaded = time.perf_counter() - started
    llm = LocalLLM(models, max_tokens=80)
    tools = TOOLS if llm.supports_tools else []
    ttfbs: list[float] = []
    misses: list[str] = []
    good = headline = 0
    for index, (question, fact) in enumerate(QUESTIONS):
        answer = await ask(llm, system, question, tools)
        ok = usable(answer, fact)
        good += ok
        headline += ok and index < HEADLINE
        ttfbs += [answer.ttfb] if answer.ttfb is not None else []
        if not ok:
            misses.append(f"Q {question!r} -> {answer.text.strip()!r} tools={answer.tools}")
    right = 0
    for prompt, expected in TOOL_PROMPTS:
        answer = await ask(llm, system, prompt, tools)
        chosen = answer.tools[0] if answer.tools else None
        right += chosen == expected
        if chosen != expected:
            misses.append(f"T {prompt!r} -> tool {chosen}, text {answer.text.strip()[:80]!r}")
    rss = rss_mib()
    models.shutdown()
    return {
        "model": models.llm.label,
        "load_s": round(loaded, 2),
        "headline": f"{headline}/{HEADLINE}",
        "usable": f"{good}/{len(QUESTIONS)}",
        "tools": f"{right}/{len(TOOL_PROMPTS)}" if tools else "no tools",
        "ttfb": stats(ttfbs),
        "rss_mib": round(rss),
        "misses": misses,
    }


def _run_model(name: str, model_dir: Path, system: str) -> dict[str, Any]:
    return asyncio.run(run_model(name, model_dir, system))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models", nargs="+", default=["qwen2.5-1.5b", "qwen2.5-0.5b", "smollm2-135m"]
    )
    parser.add_argument("--model-dir", type=Path, default=Path("data/models"))
    args = parser.parse_args()
    system = Settings().system_prompt
    rows = []
    for name in args.models:  # a process per model: each RSS is its own
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            row = pool.submit(_run_model, name, args.model_dir, system).result()
        rows.append(row)
        for miss in row["misses"]:
            print(f"  [{name}] {miss}")
    print(
        "\n| model | everyday (headline 10) | everyday (20) | tool choice | TTFB p50 ms "
        "| TTFB p95 ms | load s | RSS MiB |\n| --- | --- | --- | --- | ---: | ---: | ---: | ---: |"
    )
    for r in rows:
        t = r["ttfb"]
        print(
            f"| {r['model']} | {r['headline']} | {r['usable']} | {r['tools']} | "
            f"{t.get('p50_ms')} | {t.get('p95_ms')} | {r['load_s']} | {r['rss_mib']} |"
        )


if __name__ == "__main__":
    main()
