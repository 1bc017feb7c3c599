"""Turn-taking over WebRTC: how soon complete turns are answered, and whether a pause
inside a turn makes the bot talk over the user, side by side for several servers.

The evaluation set (``testkit/turn_clips.py``: complete turns, and turns with a 0.5 or
0.6 s pause inside, in two voices) is played by one aiortc client, clip after clip, to
each target in turn:

- ``parley``: the adaptive turn end (model + words + silence, preemptive replies);
- ``parley-fixed``: the old rule, 0.2 s VAD stop + 0.6 s speech timeout;
- ``pipecat``: Pipecat 1.14 with its default stop strategy, Smart Turn v3.2 alone
  (bench/pipecat/bot.py in bench/.venv-pipecat);
- ``pipecat-fixed``: Pipecat with the same fixed window as ``parley-fixed``.

Every model is the OpenAI-compatible stub in this process, with the delays of the issue
(STT 50 ms, LLM first token 200 ms, TTS first audio 100 ms: 350 ms in all). Its STT
"hears" each utterance right: it finds the utterance in the clip being played and
returns the words spoken there, fillers dropped, as a good STT service does
(:class:`testkit.turn_clips.ClipEar`).

Per clip, at the client: voice-to-voice (end of the clip's speech → first loud frame of
the answer) and *talk-over* (any bot audio before the user's last word ended: the bot
answered half a turn, or spoke into the pause). For Parley also, from the server:
preemptive replies used and wasted, merged turns, the end-of-turn model's time, and
whether the stored transcript holds one user turn per clip.

    .venv/bin/python -m bench.turn_taking                       # all four targets
    .venv/bin/python -m bench.turn_taking --targets parley --voices hibari --json out.json
    .venv/bin/python -m bench.turn_taking --targets parley --language es --unpunctuated

``--language es|fr|de`` plays that language's set (``testkit/turn_languages.py``) in
espeak-ng's voice for it and starts Parley with ``PARLEY_LANGUAGE`` set to it (the
Pipecat targets get no language).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from testkit.clip_ear import ClipEar
from testkit.measure import stats
from testkit.rtc_client import RTCTestClient
from testkit.rtp_loss import PacketLoss, random_loss
from testkit.targets import start_stub, start_target
from testkit.turn_clips import (
    AFTERTHOUGHT,
    COMPLETE,
    HELD_OUT_COMPLETE,
    HELD_OUT_PAUSED,
    PAUSED,
    TurnClip,
    eval_set,
    slug,
    write_wav,
)
from testkit.turn_languages import LANGUAGE_SETS

TARGETS = ("parley", "parley-fixed", "pipecat", "pipecat-fixed")
LEAD = 0.4  # silence before each clip
RMS = 200.0  # a received frame louder than this is bot speech
ANSWER_WAIT = 6.0  # after the end of speech: past this, the turn was not answered
SETTLE = 1.0  # quiet between one answer's end and the next clip
QUIET = 0.6  # no bot audio for this long: the answer has ended


def loud_frames(client: RTCTestClient, start: float, end: float) -> list[float]:
    return [t for t, rms in client.audio.frames if start <= t < end and rms > RMS]


async def play_clip(client: RTCTestClient, ear: ClipEar, clip: TurnClip, wav: Path) -> dict:
    """Play one clip; what the client saw of the answer."""
    ear.clip = clip
    started = client.play(str(wav))
    speech_end = started + LEAD + clip.speech_end
    # On until the answer after the speech has played out (or none came): the next clip
    # must not start into an answer still playing.
    while (now := time.monotonic()) < speech_end + ANSWER_WAIT:
        await asyncio.sleep(0.05)
        answer = loud_frames(client, speech_end, now)
        if answer and now - answer[-1] > QUIET and now > speech_end + 0.5:
            break
    during = loud_frames(client, started, speech_end)
    after = loud_frames(client, speech_end, speech_end + ANSWER_WAIT)
    await asyncio.sleep(SETTLE)
    return {
        "name": clip.name,
        "voice": clip.voice,
        "kind": clip.kind,
        "talk_over": bool(during),
        "talk_over_at": round(during[0] - started - LEAD, 3) if during else None,
        "voice_to_voice": round(after[0] - speech_end, 3) if after else None,
    }


# Where a turn's time went, from the server's histograms (seconds summed, per clip):
# the end of speech to the end of the turn (the VAD's stop window included), the STT's
# time from the VAD's stop to the words, the LLM's and TTS's first byte, and the end of
# speech to the first audio out.
STAGES = {
    "turn_end_wait": ("parley_user_turn_end_wait_seconds_sum", ""),
    "stt": ("parley_service_ttfb_seconds_sum", '{service="stt"}'),
    "llm": ("parley_service_ttfb_seconds_sum", '{service="llm"}'),
    "tts": ("parley_service_ttfb_seconds_sum", '{service="tts"}'),
    "server_v2v": ("parley_voice_to_voice_seconds_sum", ""),
}


async def stage_sums(url: str) -> dict[str, float]:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{url}/metrics", timeout=10)).text
    return {k: metric_values(text, name).get(labels, 0.0) for k, (name, labels) in STAGES.items()}


async def run_clips(
    url: str,
    ear: ClipEar,
    clips: list[TurnClip],
    folder: Path,
    breakdown: bool = False,
    loss: float = 0.0,
) -> dict:
    lossy = PacketLoss(random_loss(loss, seed=1)) if loss else None
    client = RTCTestClient(url, jitter_frames=1, loss=lossy)
    results = []
    try:
        await client.connect()
        await asyncio.sleep(1.0)
        for index, clip in enumerate(clips):
            wav = write_wav(clip, folder / f"clip{index:03d}.wav", LEAD)
            before = await stage_sums(url) if breakdown else {}
            results.append(await play_clip(client, ear, clip, wav))
            if breakdown:
                after = await stage_sums(url)
                results[-1]["stages_ms"] = {k: round(1000 * (after[k] - before[k])) for k in after}
    finally:
        await client.close()
    lost = {"packets_sent": lossy.sent, "packets_lost": len(lossy.lost)} if lossy else {}
    return {"pc_id": client.pc_id, "clips": results, **lost}


def metric_values(text: str, name: str) -> dict[str, float]:
    """``{labels: value}`` of one metric family in the Prometheus text."""
    out = {}
    for line in text.splitlines():
        match = re.match(rf"^{name}(\{{[^}}]*\}})? ([0-9.e+-]+)$", line)
        if match:
            out[match.group(1) or ""] = float(match.group(2))
    return out


def server_figures(url: str, pc_id: str | None, clips: int) -> dict[str, Any]:
    """Parley's own counts: preemptive replies, merges, model time, stored user turns."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    preemptive = metric_values(text, "parley_preemptive_replies_total")
    model_sum = metric_values(text, "parley_turn_model_seconds_sum")
    model_count = metric_values(text, "parley_turn_model_seconds_count")

    def mean_ms(stage: str) -> float | None:
        key = f'{{stage="{stage}"}}'
        count = model_count.get(key, 0.0)
        return round(1000 * model_sum[key] / count, 1) if count else None

    record = httpx.get(f"{url}/api/sessions/{pc_id}/transcript", timeout=10).json()
    users = [t for t in record.get("turns", []) if t["role"] == "user"]
    return {
        "preemptive_used": preemptive.get('{outcome="used"}', 0.0),
        "preemptive_wasted": preemptive.get('{outcome="wasted"}', 0.0),
        "merged_turns": sum(metric_values(text, "parley_user_turns_merged_total").values()),
        "turn_model_inference_mean_ms": mean_ms("inference"),
        "turn_model_queue_mean_ms": mean_ms("queue"),
        "stored_user_turns": len(users),
        "clips": clips,
    }


def summarise(results: list[dict], voice: str) -> dict[str, Any]:
    mine = [r for r in results if r["voice"] == voice]
    complete = [r for r in mine if r["kind"] == "complete"]
    questions = [r for r in complete if r["name"].split(":")[-1] in question_slugs()]
    paused = [r for r in mine if r["kind"] != "complete"]
    v2v = [r["voice_to_voice"] for r in questions if r["voice_to_voice"] is not None]
    answered = [r for r in questions if r["voice_to_voice"] is not None and "stages_ms" in r]
    return {
        "question_stages_p50_ms": {
            stage: stats([r["stages_ms"][stage] / 1000 for r in answered]).get("p50_ms")
            for stage in STAGES
        },
        "questions": len(questions),
        "questions_answered": len(v2v),
        "question_v2v": stats(v2v),
        "questions_within_1_5_s": sum(1 for v in v2v if v <= 1.5),
        "complete_v2v": stats(
            [r["voice_to_voice"] for r in complete if r["voice_to_voice"] is not None]
        ),
        "complete_talk_over": sum(r["talk_over"] for r in complete),
        "paused": len(paused),
        "paused_talk_over": sum(r["talk_over"] for r in paused),
        "paused_talk_over_clips": [r["name"] for r in paused if r["talk_over"]],
    }


SENTENCES = {
    "bench": (COMPLETE, PAUSED),
    "held-out": (HELD_OUT_COMPLETE, HELD_OUT_PAUSED),
    "afterthought": ((), AFTERTHOUGHT),
}


def question_slugs() -> set[str]:
    """The clip-name tails of the complete turns that are questions, in every set."""
    every = [q for complete, _ in SENTENCES.values() for q in complete]
    every += [q for complete, _, _ in LANGUAGE_SETS.values() for q in complete]
    return {slug(q) for q in every if q.endswith("?")}


def run_target(target: str, args: argparse.Namespace, clips: list[TurnClip], folder: Path) -> dict:
    ear = ClipEar(punctuation=not args.unpunctuated)
    answer = "Sure, here is the answer."
    stub = start_stub(args, answer, "")
    stub.config.transcriber = ear
    args.turn_end = "fixed" if target == "parley-fixed" else "adaptive"
    args.pipecat_stop = "speech-timeout" if target == "pipecat-fixed" else "smart-turn"
    kind = "pipecat" if target.startswith("pipecat") else "parley"
    language = {"PARLEY_LANGUAGE": args.language, **dict(kv.split("=", 1) for kv in args.set)}
    server = start_target(kind, args, stub, folder / f"{target}.log", env=language)
    try:
        breakdown = kind == "parley"
        out = asyncio.run(run_clips(server.url, ear, clips, folder, breakdown, args.loss))
        if kind == "parley":
            out["server"] = server_figures(server.url, out["pc_id"], len(clips))
        llm_calls = sum(1 for r in stub.requests() if r.path.endswith("/chat/completions"))
        out["llm_calls"] = llm_calls
        # Speculative STT requests a pause the user spoke through wasted show up here.
        out["stt_calls"] = sum(1 for r in stub.requests() if r.path.endswith("/transcriptions"))
    finally:
        server.stop()
        stub.stop()
    out["by_voice"] = {v: summarise(out["clips"], v) for v in args.voices}
    return out


def markdown(report: dict[str, Any]) -> str:
    rows = [
        "| target | voice | questions answered | question v2v p50 / p95 / max ms | ≤ 1.5 s "
        "| complete v2v p50 ms | paused turns talked over | LLM calls |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for target, out in report["targets"].items():
        for voice, s in out["by_voice"].items():
            q = s["question_v2v"]
            v2v = f"{q.get('p50_ms')} / {q.get('p95_ms')} / {q.get('max_ms')}"
            rows.append(
                f"| {target} | {voice} | {s['questions_answered']}/{s['questions']} | {v2v} "
                f"| {s['questions_within_1_5_s']} | {s['complete_v2v'].get('p50_ms')} "
                f"| {s['paused_talk_over']}/{s['paused']} | {out['llm_calls']} |"
            )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--voices", help="default: hibari,espeak; espeak-<language>")
    parser.add_argument("--pauses", default="0.5,0.6")
    parser.add_argument("--stt-delay", type=float, default=0.05)
    parser.add_argument("--llm-delay", type=float, default=0.2)
    parser.add_argument("--tts-delay", type=float, default=0.1)
    parser.add_argument("--tts-seconds-per-char", type=float, default=0.06)
    parser.add_argument("--vad-stop-secs", type=float, default=0.2)
    parser.add_argument("--user-speech-timeout", type=float, default=0.6)
    parser.add_argument("--sentences", choices=tuple(SENTENCES), default="bench")
    parser.add_argument(
        "--language", choices=tuple(LANGUAGE_SETS), default="en",
        help="another language's set and voice, and PARLEY_LANGUAGE (not en: --sentences "
        "is ignored)",
    )  # fmt: skip
    parser.add_argument(
        "--unpunctuated", action="store_true", help="the stub STT returns words without punctuation"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PARLEY_X=VALUE",
        help="another Parley setting (repeatable)",
    )
    parser.add_argument("--loss", type=float, default=0.0,
                        help="%% of the caller's audio packets lost on the way")  # fmt: skip
    parser.add_argument("--limit", type=int, default=0, help="only the first N clips (0: all)")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args()
    args.users = 1
    complete, paused, voices = LANGUAGE_SETS[args.language]
    if args.language == "en":
        complete, paused = SENTENCES[args.sentences]
    args.voices = tuple(args.voices.split(",")) if args.voices else voices
    pauses = tuple(float(p) for p in args.pauses.split(","))
    clips = eval_set(voices=args.voices, pauses=pauses, complete=complete, paused=paused)
    if args.limit:
        clips = clips[: args.limit]
    folder = Path(tempfile.mkdtemp(prefix="turn-taking-"))
    report: dict[str, Any] = {
        "delays_ms": {"stt": 1000 * args.stt_delay, "llm": 1000 * args.llm_delay,
                      "tts": 1000 * args.tts_delay},
        "clips": len(clips),
        "sentences": args.sentences if args.language == "en" else args.language,
        "language": args.language,
        "punctuation": not args.unpunctuated,
        "loss_pct": args.loss,
        "targets": {},
    }  # fmt: skip
    for target in args.targets.split(","):
        started = time.monotonic()
        report["targets"][target] = run_target(target, args, clips, folder)
        report["targets"][target]["seconds"] = round(time.monotonic() - started, 1)
        print(f"{target}: done in {report['targets'][target]['seconds']} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    for target, out in report["targets"].items():
        print(target, json.dumps({"server": out.get("server"), **out["by_voice"]}, indent=1))
    print()
    print(markdown(report))
    print(f"\nlogs and clips: {folder}")


if __name__ == "__main__":
    main()
