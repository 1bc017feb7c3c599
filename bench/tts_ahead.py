"""How much speech a long answer synthesizes, and throws away, when it is interrupted.

One conversation on the real paced track (read in real time), its LLM and TTS the
OpenAI-compatible services against the stub on 127.0.0.1 (fast: no delay unless
``--tts-delay``). The stub answers with a long story (about ``--sentences`` sentences of
2 to 4 s of speech each, at 0.07 s per character, about a real voice's pace); the user
barges in once ``--interrupt`` seconds have played. Printed per limit
(``PARLEY_TTS_AHEAD_SECONDS``; 0 = no limit, the behaviour before back-pressure):

- TTS requests made by the barge-in, and after it (should be 0);
- seconds of speech synthesized (asked of the TTS), played, and thrown away;
- the most audio queued on the track at once, and underruns (the output ran dry mid-answer).

Medians over ``-n`` runs.

    .venv/bin/python -m bench.tts_ahead [-n 3] [--ahead 0 3] [--interrupt 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from pipeline.events import BotStartedSpeaking, BotStoppedSpeaking
from server.media.outbound_track import OUT_RATE
from testkit.conversation_call import Call
from testkit.openai_stub import TTS_RATE, OpenAIStub

SPEECH = "/v1/audio/speech"
SECONDS_PER_CHAR = 0.07
ENDINGS = (
    "the robot walked along the shore",
    "it counted the waves",
    "the lighthouse keeper slept until the sun came up",
)


def story(sentences: int) -> str:
    """Sentences of 30 to 60 characters (2 to 4 s of speech), no commas: one TTS request
    each."""
    return " ".join(f"In part {n + 1} {ENDINGS[n % 3]}." for n in range(sentences))


async def one_run(stub: OpenAIStub, ahead: float, interrupt_at: float) -> dict[str, float]:
    async with Call(stub, tts_ahead=ahead) as call:
        peak = 0.0
        call.conv.user.add_text("Tell me a long story.")
        await call.until(BotStartedSpeaking, within=10)
        while call.track._sent_total / (2 * OUT_RATE) < interrupt_at:
            peak = max(peak, call.track.queued_seconds)
            await asyncio.sleep(0.01)
        underruns = call.kinds().count(BotStoppedSpeaking)
        call.conv.interrupt()
        requests = stub.requests(SPEECH)
        made = len(requests)
        synthesized = sum(stub.tts_samples(r.body["input"]) for r in requests) / TTS_RATE
        played = call.track._sent_total / (2 * OUT_RATE)
        await asyncio.sleep(1.0)
        after = len(stub.requests(SPEECH)) - made
    return {
        "requests": made,
        "requests_after": after,
        "synthesized_s": synthesized,
        "played_s": played,
        "wasted_s": synthesized - played,
        "peak_queued_s": peak,
        "underruns": underruns,
    }


def configure(stub: OpenAIStub, text: str, tts_delay: float) -> None:
    stub.config.default_text = text
    stub.config.tts_seconds_per_char = SECONDS_PER_CHAR
    stub.config.tts_first_audio_delay = tts_delay


async def main(args: argparse.Namespace) -> None:
    text = story(args.sentences)
    with OpenAIStub() as stub:
        configure(stub, text, args.tts_delay)
        total = sum(stub.tts_samples(s + ".") for s in text.split(". ")) / TTS_RATE
        print(f"answer: {args.sentences} sentences, {total:.0f} s of speech; "
              f"barge-in after {args.interrupt:g} s played; TTS first-audio delay "
              f"{args.tts_delay:g} s; medians of {args.n} runs")  # fmt: skip
        for ahead in args.ahead:
            runs: list[dict[str, Any]] = []
            for _ in range(args.n):
                stub.reset()
                configure(stub, text, args.tts_delay)
                runs.append(await one_run(stub, ahead, args.interrupt))
                await asyncio.sleep(0.2)
            label = f"ahead={ahead:g} s" if ahead else "no limit"
            figures = ", ".join(
                f"{key} {statistics.median(r[key] for r in runs):.2f}" for key in runs[0]
            )
            print(f"{label:>14}: {figures}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=3, help="runs per limit")
    parser.add_argument("--ahead", type=float, nargs="+", default=[0.0, 3.0])
    parser.add_argument("--interrupt", type=float, default=5.0, help="seconds played first")
    parser.add_argument("--sentences", type=int, default=40)
    parser.add_argument("--tts-delay", type=float, default=0.0)
    asyncio.run(main(parser.parse_args()))
