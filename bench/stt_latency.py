"""STT time left after the user stops: one-shot vs streaming, per embedded whisper model.

Each generated sentence of 2-6 s (``testkit/stt_sentences.py``, espeak-ng and the
embedded hibari voice) is played to a real :class:`pipeline.hearing.transcriber.Transcriber` in
real time (20 ms frames, paced by the clock), with the VAD's events placed where the VAD
sends them: ``SpeechStarted`` 0.2 s after the onset, ``SpeechStopped`` (dated at the
speech's end) 0.2 s after the end. The figure is the time from that stop to the final
``Transcription``: p50 / p95 per model and mode, with the CPU seconds the process spent
per utterance (its own CPU time from the first frame to the text: interim passes
included) and the word error rate of the final texts.

Modes: ``before`` (one pass at the stop, faster-whisper over its 30 s window: the old
path), ``oneshot`` (one pass at the stop, the short window: ``SHORT_WINDOW_DECODING``) and
``stream`` (the short window with interim passes and LocalAgreement-2; the final pass
generates only the uncommitted tail). Models: ``tiny.en`` and ``base`` (``--base-path``,
else the registry's whisper-base).

    .venv/bin/python -m bench.stt_latency                       # 8 sentences per voice
    .venv/bin/python -m bench.stt_latency --models base --per-voice 4 --modes oneshot,stream
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from pipeline.events import Event, SpeechStarted, SpeechStopped, Transcription
from pipeline.hearing.transcriber import Transcriber
from pipeline.services.embedded import EmbeddedModels
from pipeline.services.local_stt import SHORT_WINDOW_DECODING, TUNED_30S_DECODING, LocalSTT
from testkit.stt_sentences import PRE_ROLL_SECS, SENTENCES, VOICES, speech, utterance
from testkit.wer import wer

RATE = 16000
FRAME = 320  # 20 ms
START_SECS = STOP_SECS = 0.2  # the VAD's default windows


def registry(model: str, base_path: str) -> EmbeddedModels:
    if model == "tiny.en":
        return EmbeddedModels(stt="whisper-tiny.en")
    dirs = {"stt": Path(base_path)} if base_path else None
    return EmbeddedModels(package_dirs=dirs, stt="whisper-base")


def sentences(voice: str, count: int) -> list[str]:
    """The first ``count`` sentences whose speech lasts 2-6 s in ``voice``."""
    chosen = [s for s in SENTENCES if 2.0 <= speech(s, voice).size / RATE <= 6.0]
    return chosen[:count]


async def play(stt: LocalSTT, streaming: bool, text: str, voice: str) -> dict[str, Any]:
    """One utterance in real time; the stop-to-text seconds, CPU seconds and text."""
    pcm = utterance(text, voice, after=1.0)  # room for the VAD's stop window
    speech_end = PRE_ROLL_SECS + speech(text, voice).size / RATE
    done = asyncio.Event()
    said: list[str] = []

    def emit(event: Event) -> None:
        if isinstance(event, Transcription):
            said.append(event.text)
            done.set()

    transcriber = Transcriber(stt, emit, streaming=streaming)
    cpu, begin = time.process_time(), time.perf_counter()
    started = stopped = False
    for index in range(pcm.size // FRAME):
        t = index * FRAME / RATE
        await asyncio.sleep(max(0.0, begin + t - time.perf_counter()))
        transcriber.push_audio(pcm[index * FRAME : (index + 1) * FRAME].tobytes(), t)
        if not started and t >= PRE_ROLL_SECS + START_SECS:
            transcriber.handle(SpeechStarted(PRE_ROLL_SECS))
            started = True
        if t + FRAME / RATE >= speech_end + STOP_SECS:
            stop_at = time.perf_counter()
            transcriber.handle(SpeechStopped(speech_end))
            stopped = True
            break
    assert stopped
    await asyncio.wait_for(done.wait(), 60)
    latency = time.perf_counter() - stop_at
    result = {
        "latency": latency,
        "cpu": time.process_time() - cpu,
        "text": said[0],
        "passes": transcriber.interim_passes,
    }
    await transcriber.close()
    return result


def summary(rows: list[dict[str, Any]], refs: list[str]) -> dict[str, Any]:
    latencies = sorted(r["latency"] for r in rows)
    p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]
    return {
        "n": len(rows),
        "p50_s": round(statistics.median(latencies), 3),
        "p95_s": round(p95, 3),
        "cpu_s": round(statistics.median(r["cpu"] for r in rows), 3),
        "passes": round(statistics.mean(r["passes"] for r in rows), 1),
        "wer": round(wer(list(zip(refs, (r["text"] for r in rows), strict=True))), 4),
    }


async def run_model(model: str, args: argparse.Namespace) -> dict[str, Any]:
    models = registry(model, args.base_path if model == "base" else "")
    await models.stt.get()
    modes = {
        "before": (LocalSTT(models, TUNED_30S_DECODING), False),
        "oneshot": (LocalSTT(models, SHORT_WINDOW_DECODING), False),
        "stream": (LocalSTT(models, SHORT_WINDOW_DECODING), True),
    }
    report: dict[str, Any] = {}
    for voice in args.voices.split(","):
        texts = sentences(voice, args.per_voice)
        rows: dict[str, list[dict[str, Any]]] = {m: [] for m in args.modes.split(",")}
        for text in texts:
            for mode, found in rows.items():  # interleaved: a busy box slows all alike
                stt, streaming = modes[mode]
                found.append(await play(stt, streaming, text, voice))
                if args.verbose:
                    print(f"  {model} {voice} {mode:7} {found[-1]['latency']:.3f}s "
                          f"{found[-1]['text']!r}")  # fmt: skip
        for mode, found in rows.items():
            report[f"{model} {voice} {mode}"] = summary(found, texts)
    models.shutdown()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="tiny.en,base", help="of tiny.en, base")
    parser.add_argument("--base-path", default="", help="whisper base folder ('' = the registry's)")
    parser.add_argument("--modes", default="before,oneshot,stream")
    parser.add_argument("--voices", default=",".join(VOICES))
    parser.add_argument("--per-voice", type=int, default=8, help="sentences per voice")
    parser.add_argument("--verbose", action="store_true", help="print every utterance")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    report: dict[str, Any] = {}
    for model in args.models.split(","):
        report.update(asyncio.run(run_model(model, args)))
    print(f"{'model / voice / mode':28} {'p50 s':>6} {'p95 s':>6} {'CPU s':>6} "
          f"{'passes':>6} {'WER':>6}")  # fmt: skip
    for key, row in report.items():
        print(f"{key:28} {row['p50_s']:6.3f} {row['p95_s']:6.3f} {row['cpu_s']:6.2f} "
              f"{row['passes']:6.1f} {row['wer']:6.1%}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
