"""Client overhead of the OpenAI-compatible services, against the stub with zero delay.

For each service, the same request is timed through the service (the real ``openai``
client plus our parsing) and as a raw ``httpx`` call that does the minimum (read the SSE
lines and parse their JSON, post the same WAV, read the first audio bytes). The raw
call is the stub's own floor; client - raw is what the service adds. Both share one
process with the stub's server thread, so absolute numbers include that contention;
the difference is the point. Cases run interleaved in rounds, after a short warm-up.

    .venv/bin/python -m bench.stub_overhead [-n 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable

import httpx
import numpy as np

from pipeline.services.llm import TextDelta
from pipeline.services.openai_llm import OpenAILLM
from pipeline.services.openai_stt import OpenAISTT, wav_bytes
from pipeline.services.openai_tts import OpenAITTS
from testkit.openai_stub import OpenAIStub

MESSAGES = [{"role": "user", "content": "Say hello."}]
SPEECH = "Hello there, how can I help you today?"
WARMUP = 5
CASES = {
    "llm_first_token": "LLM time to first token",
    "llm_complete": "LLM short stream to completion",
    "stt": "STT, one 1 s utterance",
    "tts_first_audio": "TTS time to first audio",
}


class Raw:
    """The floor: each request done with plain httpx, parsing only what is needed."""

    def __init__(self, client: httpx.AsyncClient, wav: bytes) -> None:
        self.client = client
        self.wav = wav

    async def llm(self) -> tuple[float, float]:
        """Seconds to the first content delta and to the end of the stream."""
        started = time.perf_counter()
        first = 0.0
        body = {"model": "m", "messages": MESSAGES, "stream": True}
        body["stream_options"] = {"include_usage": True}
        async with self.client.stream("POST", "/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                choices = chunk["choices"]
                if not first and choices and choices[0]["delta"].get("content"):
                    first = time.perf_counter() - started
        return first, time.perf_counter() - started

    async def stt(self) -> None:
        files = {"file": ("audio.wav", self.wav, "audio/wav")}
        response = await self.client.post("/audio/transcriptions", files=files, data={"model": "m"})
        response.json()["text"]

    async def tts_first_audio(self) -> None:
        body = {"model": "m", "voice": "v", "input": SPEECH, "response_format": "pcm"}
        async with self.client.stream("POST", "/audio/speech", json=body) as response:
            async for _ in response.aiter_bytes():
                break


async def _timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def _rounds(stub: OpenAIStub, n: int) -> dict[str, dict[str, list[float]]]:
    pcm = (3000 * np.sin(np.arange(16000) / 16000 * 2 * np.pi * 220)).astype(np.int16)
    common = {"base_url": stub.base_url, "api_key": stub.api_key}
    llm = OpenAILLM("m", **common)
    stt = OpenAISTT("m", **common)
    tts = OpenAITTS("m", "v", **common)
    headers = {"authorization": f"Bearer {stub.api_key}"}
    times: dict[str, dict[str, list[float]]] = {k: {"raw": [], "client": []} for k in CASES}

    async def llm_stream() -> tuple[float, float]:
        started = time.perf_counter()
        first = 0.0
        async for chunk in llm.stream(MESSAGES):
            if not first and isinstance(chunk, TextDelta):
                first = time.perf_counter() - started
        return first, time.perf_counter() - started

    async def tts_first() -> None:
        stream = tts.synthesize(SPEECH)
        await anext(stream)
        await stream.aclose()

    async with httpx.AsyncClient(base_url=stub.base_url, headers=headers) as client:
        raw = Raw(client, wav_bytes(pcm, 16000))
        for i in range(n + WARMUP):
            round_: dict[tuple[str, str], float] = {}
            for kind, run in (("raw", raw.llm), ("client", llm_stream)):
                first, total = await run()
                round_["llm_first_token", kind] = first
                round_["llm_complete", kind] = total
            round_["stt", "raw"] = await _timed(raw.stt)
            round_["stt", "client"] = await _timed(lambda: stt.transcribe(pcm, 16000))
            round_["tts_first_audio", "raw"] = await _timed(raw.tts_first_audio)
            round_["tts_first_audio", "client"] = await _timed(tts_first)
            if i >= WARMUP:
                for (case, kind), seconds in round_.items():
                    times[case][kind].append(seconds)
    for service in (llm, stt, tts):
        await service.aclose()
    return times


def _stats(values: list[float]) -> tuple[float, float]:
    """Median and p95, in milliseconds."""
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


def measure(n: int = 50) -> dict[str, dict[str, float]]:
    """Per case: raw and client median / p95 (ms) and the median overhead (ms)."""
    with OpenAIStub() as stub:
        times = asyncio.run(_rounds(stub, n))
    out: dict[str, dict[str, float]] = {}
    for case, kinds in times.items():
        raw_median, raw_p95 = _stats(kinds["raw"])
        client_median, client_p95 = _stats(kinds["client"])
        out[case] = {
            "n": len(kinds["client"]),
            "raw_median_ms": raw_median,
            "raw_p95_ms": raw_p95,
            "client_median_ms": client_median,
            "client_p95_ms": client_p95,
            "overhead_median_ms": client_median - raw_median,
        }
    return out


def table(results: dict[str, dict[str, float]]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| case | n | raw httpx median / p95 (ms) | client median / p95 (ms) | overhead (ms) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for case, r in results.items():
        lines.append(
            f"| {CASES[case]} | {r['n']:.0f} "
            f"| {r['raw_median_ms']:.2f} / {r['raw_p95_ms']:.2f} "
            f"| {r['client_median_ms']:.2f} / {r['client_p95_ms']:.2f} "
            f"| {r['overhead_median_ms']:+.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=50, help="measured rounds per case")
    args = parser.parse_args()
    print(table(measure(args.n)))


if __name__ == "__main__":
    main()
