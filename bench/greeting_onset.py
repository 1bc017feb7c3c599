"""Offline: a caller who talks as the greeting starts, through Opus and the echo canceller,
decoded two ways: does the VAD hear the question from its first word?

The server's inbound path, without the network: the caller's question (five questions,
hibari and espeak) starts ``--offsets`` after the greeting's first sample (hibari's
"Hello! How can I help you today?", or the stub's buzz), with room noise and no echo;
the microphone is encoded as a client would (libopus, 48 kHz mono, VOIP, 32 kbit/s) and
decoded either at 48 kHz then resampled to 16 kHz (``48k``: PyAV's libswresample) or by
libopus straight at 16 kHz (``16k``). Each stream goes through the session's
:class:`~pipeline.audio.echo.EchoCanceller` (the greeting as its reference, 20 ms at a
time, as the track plays it) and the VAD. Per run: the VAD's onset of the first speech
it confirms against the question's first word ("late": past the STT's 0.3 s pre-roll),
and whether the STT's recording, with the rejoin of a false start and the pre-roll,
still began after the first word ("cut").

    .venv/bin/python -m bench.greeting_onset
    .venv/bin/python -m bench.greeting_onset --bot buzz --offsets 0:0.6:0.02
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from bench.greeting_overlap import GREETING, QUESTIONS, VOICES
from pipeline.audio.echo import EchoCanceller, EchoPath
from pipeline.audio.resampling import StreamResampler, resample
from pipeline.events import SpeechStarted
from pipeline.hearing.rejoin import FalseStartRejoin
from pipeline.hearing.vad import VADAnalyzer, VADParams
from server.media.libopus import Decoder, Encoder
from testkit.openai_stub.audio import buzz
from testkit.openai_stub.script import TTS_RATE
from testkit.turn_clips import RATE, TurnClip, complete_clip
from testkit.voices import render

WIDE = 48000
FRAME = WIDE // 50  # 20 ms at 48 kHz
PRE_ROLL = 0.3  # what the transcriber keeps before the VAD's onset


def bot_audio(kind: str) -> np.ndarray:
    """The greeting at 48 kHz, as the outbound track plays it."""
    if kind == "none":  # the control: no greeting
        return np.zeros(0, np.int16)
    if kind == "buzz":
        return resample(buzz(int(2.0 * TTS_RATE)), TTS_RATE, WIDE)
    return resample(render(GREETING, "hibari"), RATE, WIDE)


def microphone(clip: TurnClip, at: float, seconds: float) -> np.ndarray:
    """The caller's microphone at 48 kHz: room noise and the question from ``at``."""
    n = round(seconds * RATE)
    mic = np.random.default_rng(0).normal(0, 20, n)
    start = round(at * RATE)
    end = min(n, start + clip.audio.size)
    mic[start:end] += clip.audio[: end - start]
    return resample(np.clip(mic, -32768, 32767).astype(np.int16), RATE, WIDE)


def heard_onset(bot: np.ndarray, mic: np.ndarray, decode: str) -> tuple[float, float] | None:
    """The onset of the first speech the VAD confirms, through Opus, ``decode`` and the
    echo canceller, and where the STT's recording of it starts (before its pre-roll: a
    false start just before, while the echo path is unknown, is its start; see
    :mod:`pipeline.hearing.rejoin`); None if the VAD confirms no speech."""
    encoder = Encoder(WIDE, 32000, 10)
    decoder = Decoder(RATE if decode == "16k" else WIDE)
    resampler = StreamResampler(RATE)
    canceller = EchoCanceller()
    vad = VADAnalyzer(VADParams(confidence=0.7, start_secs=0.2, stop_secs=0.2))
    rejoin = FalseStartRejoin()
    heard_at = 0.0  # session time of the next decoded sample
    for i in range(0, mic.size - FRAME + 1, FRAME):
        t = i / WIDE
        if i < bot.size:
            frame = np.zeros(FRAME, np.int16)
            part = bot[i : i + FRAME]
            frame[: part.size] = part
            canceller.played(frame.tobytes(), WIDE, t)
        pcm = decoder.decode(encoder.encode(mic[i : i + FRAME].tobytes()))
        if decode == "48k":
            pcm = resampler.resample(pcm, WIDE)
        if not pcm:
            continue
        cleaned = canceller.process(pcm, heard_at)
        for event in vad.push(cleaned, heard_at):
            rejoin.see(event)
            if isinstance(event, SpeechStarted):
                unknown = canceller.state is EchoPath.UNKNOWN
                return event.t, rejoin.for_stt(event, unknown).t
        heard_at += len(pcm) / 2 / RATE
    return None


def run(args: argparse.Namespace) -> dict[str, dict[str, float | int]]:
    start, stop, step = (float(x) for x in args.offsets.split(":"))
    offsets = list(np.arange(start, stop + 1e-9, step))
    bot = bot_audio(args.bot)
    clips = [complete_clip(q, v) for q in QUESTIONS for v in VOICES]
    report: dict[str, dict[str, float | int]] = {}
    for decode in args.decode.split(","):
        lateness: list[float] = []  # the VAD's onset after the first word
        cut = 0  # the STT's recording (its pre-roll included) began after the first word
        missed = 0
        for clip in clips:
            for at in offsets:
                mic = microphone(clip, at, at + clip.audio.size / RATE + 1.0)
                heard = heard_onset(bot, mic, decode)
                first_word = at + clip.words[0].start
                if heard is None:
                    missed += 1
                else:
                    lateness.append(heard[0] - first_word)
                    cut += int(heard[1] - PRE_ROLL > first_word)
        runs = len(clips) * len(offsets)
        late = sum(x > PRE_ROLL for x in lateness) + missed
        report[decode] = {
            "runs": runs,
            "late": int(late),
            "late_pct": round(100 * late / runs, 1),
            "missed": missed,
            "stt_cut": cut,
            "lateness_p50_ms": round(1000 * statistics.median(lateness)),
            "lateness_p90_ms": round(1000 * float(np.percentile(lateness, 90))),
            "lateness_max_ms": round(1000 * max(lateness)),
        }
        print(decode, json.dumps(report[decode]), flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bot", choices=("hibari", "buzz", "none"), default="hibari")
    parser.add_argument("--offsets", default="0:0.6:0.04", help="start:stop:step, seconds")
    parser.add_argument("--decode", default="48k,16k")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = run(args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(
        "\n| decode | runs | VAD late (> 0.3 s) | STT cut | missed | VAD onset late p50/p90/max |"
    )
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for decode, r in report.items():
        late = f"{r['late']} ({r['late_pct']} %)"
        lateness = f"{r['lateness_p50_ms']} / {r['lateness_p90_ms']} / {r['lateness_max_ms']} ms"
        print(f"| {decode} | {r['runs']} | {late} | {r['stt_cut']} | {r['missed']} | {lateness} |")


if __name__ == "__main__":
    main()
