"""The end-of-turn evaluation set through the real turn-taking path, in virtual time.

Every clip of ``testkit/turn_clips.py`` (complete turns; turns with a 0.5 or 0.6 s pause:
prefaces, unfinished clauses, hesitations; in two voices) goes through the real Silero
VAD, transcriber and Smart Turn model and the user-turn controller
(``testkit/turn_replay.py``). Time is simulated, so a busy machine measures the same: the
STT's words arrive ``--stt-delay`` after the utterance was sent, the model's score
``--model-delay`` after the pause.

Per rule (adaptive, fixed) and STT (``perfect``: every word right, fillers dropped, as a
good STT service; ``whisper``: the embedded whisper tiny.en's own words), per voice: how
many paused turns ended early (the bot would talk over the user or answer half a turn),
how long complete turns waited from the end of speech to the end of the turn, when the
answer would start with ``--reply`` s of LLM + TTS (preemptive replies included), and how
many preemptive replies would be wasted.

    .venv/bin/python -m bench.turn_eval                      # both rules, both STTs
    .venv/bin/python -m bench.turn_eval --stt perfect --rules adaptive --verbose
    .venv/bin/python -m bench.turn_eval --line phone     # through 8 kHz G.711 μ-law
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.hearing.smart_turn import SmartTurnModel
from pipeline.services.embedded import EmbeddedModels
from pipeline.services.local_stt import LocalSTT
from pipeline.turns import UserTurnParams
from testkit.phone_line import phone_line
from testkit.turn_clips import VOICES, eval_set
from testkit.turn_replay import Replay, TurnReplayer, summary


def by_kind(replays: list[Replay]) -> dict[str, str]:
    """Early ends per kind of clip: ``"early/total"``."""
    kinds = sorted({r.clip.kind for r in replays})
    return {
        k: f"{sum(r.early for r in replays if r.clip.kind == k)}/"
        f"{sum(r.clip.kind == k for r in replays)}"
        for k in kinds
    }


async def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    model = SmartTurnModel()
    clips = eval_set(voices=tuple(args.voices.split(",")))
    if args.line == "phone":  # what a phone provider's media stream delivers
        clips = [replace(clip, audio=phone_line(clip.audio)) for clip in clips]
    whisper = None
    report: dict[str, Any] = {"clips": len(clips), "line": args.line, "runs": {}}
    for stt in args.stt.split(","):
        if stt == "whisper" and whisper is None:
            models = EmbeddedModels.shared()
            await models.stt.get()
            whisper = LocalSTT(models)
        for rule in args.rules.split(","):
            params = UserTurnParams(turn_end=rule, user_speech_timeout=0.6)
            replayer = TurnReplayer(
                whisper if stt == "whisper" else None, model, params,
                stt_delay=args.stt_delay, model_delay=args.model_delay,
            )  # fmt: skip
            replays = [await replayer.replay(clip) for clip in clips]
            if args.verbose:
                for r in replays:
                    flag = "EARLY " if r.early else ""
                    print(f"{rule:8} {stt:7} {flag}{r.clip.name} stops={r.stops} "
                          f"p={[round(p, 2) for p in r.scores]} heard={r.texts}")  # fmt: skip
            report["runs"][f"{rule}/{stt}"] = {
                voice: {
                    **summary([r for r in replays if r.clip.voice == voice], args.reply),
                    "early_by_kind": by_kind(
                        [r for r in replays if r.clip.voice == voice and r.clip.paused]
                    ),
                }
                for voice in args.voices.split(",")
            }
    return report


def markdown(report: dict[str, Any]) -> str:
    rows = [
        "| rule / STT | voice | paused turns ended early | by kind | complete: wait p50 / p95 "
        "/ max s | answer after speech p50 / p95 s | predictions wasted |",
        "| --- | --- | ---: | --- | --- | --- | ---: |",
    ]
    for run, voices in report["runs"].items():
        for voice, s in voices.items():
            kinds = ", ".join(f"{k} {v}" for k, v in s["early_by_kind"].items())
            rows.append(
                f"| {run} | {voice} | {s['paused_turns_ended_early']}/{s['paused_turns']} "
                f"| {kinds} | {s['complete_wait_p50']} / {s['complete_wait_p95']} / "
                f"{round(s['complete_wait_max'], 3)} | {s['answer_after_speech_p50']} / "
                f"{s['answer_after_speech_p95']} | {s['wasted_predictions']}/{s['clips']} |"
            )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rules", default="adaptive,fixed")
    parser.add_argument("--stt", default="perfect,whisper")
    parser.add_argument("--voices", default=",".join(VOICES))
    parser.add_argument("--stt-delay", type=float, default=0.05)
    parser.add_argument("--model-delay", type=float, default=0.05)
    parser.add_argument("--reply", type=float, default=0.3, help="LLM + TTS to first audio, s")
    parser.add_argument("--line", choices=("wide", "phone"), default="wide")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = asyncio.run(evaluate(args))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=1))
    print()
    print(markdown(report))


if __name__ == "__main__":
    main()
