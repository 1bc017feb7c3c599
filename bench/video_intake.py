"""Video intake: what a shared camera costs the server when nobody looks, and what a look
costs.

1. **Idle video track** (live): N aiortc clients send a camera (640x480, ``--fps``, a
   moving pattern with some noise, VP8 at aiortc's ~1 Mbps) and a silent microphone to a
   Parley server, first with ``PARLEY_LLM_VISION=false`` (video answered inactive: the
   client sends none) and then ``true`` (received, decoded only on a look; nobody looks
   here). The server's CPU (% of one core, from /proc) is sampled meanwhile, the baseline
   of the server with no call subtracted; the difference between the two runs is the
   idle video track's cost. Frames received and decoded come from the session endpoint.
2. **Decoding** (offline, this process): the same kind of clip decoded frame by frame
   (what aiortc does by default: the cost avoided), and one keyframe decoded, scaled to
   512 px and JPEG-encoded (the cost of one look).

    .venv/bin/python -m bench.video_intake --users 2 --seconds 15
"""

from __future__ import annotations

import argparse
import asyncio
import fractions
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.codecs import depayload, get_encoder
from aiortc.mediastreams import MediaStreamError
from av import VideoFrame

from server.media.video_frames import KeyframeDecoder
from testkit.measure import mean_cpu
from testkit.rtc_client import RTCTestClient
from testkit.targets import start_stub, start_target
from testkit.video_clips import VP8

WIDTH, HEIGHT = 640, 480


def pattern(n: int) -> list[np.ndarray]:
    """``n`` YUV-ready RGB frames: a gradient, a square moving across, a band of noise
    (so that inter frames carry something, as a real camera's do)."""
    rng = np.random.default_rng(1)
    x = np.linspace(0, 255, WIDTH, dtype=np.float32)
    base = np.empty((HEIGHT, WIDTH, 3), np.uint8)
    base[..., 0] = x
    base[..., 1] = x[::-1]
    base[..., 2] = 128
    frames = []
    for i in range(n):
        rgb = base.copy()
        left = (i * 17) % (WIDTH - 80)
        rgb[200:280, left : left + 80] = 255
        rgb[400:440] = rng.integers(0, 255, (40, WIDTH, 3), dtype=np.uint8)
        frames.append(rgb)
    return frames


class PatternCamera(MediaStreamTrack):
    """The pattern, looped, at ``fps``."""

    kind = "video"

    def __init__(self, fps: float) -> None:
        super().__init__()
        self.fps = fps
        self._frames = [VideoFrame.from_ndarray(f, format="rgb24").reformat(format="yuv420p")
                        for f in pattern(30)]  # fmt: skip
        self._n = 0
        self._start: float | None = None

    async def recv(self) -> VideoFrame:  # type: ignore[override]
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        self._start = self._start or now
        await asyncio.sleep(max(0.0, self._start + self._n / self.fps - now))
        source = self._frames[self._n % len(self._frames)]
        frame = VideoFrame.from_ndarray(source.to_ndarray(), format="yuv420p")
        frame.pts, frame.time_base = round(self._n * 90000 / self.fps), fractions.Fraction(1, 90000)
        self._n += 1
        return frame


async def hold_calls(url: str, users: int, pid: int, seconds: float, fps: float) -> dict[str, Any]:
    clients = [RTCTestClient(url, jitter_frames=1, camera=PatternCamera(fps)) for _ in range(users)]
    try:
        for client in clients:
            await client.connect()
        await asyncio.sleep(2.0)  # past connection set-up and the first keyframe
        before = await video_counts(url, clients)
        loop = asyncio.get_running_loop()
        cpu = await loop.run_in_executor(None, mean_cpu, pid, seconds)
        after = await video_counts(url, clients)
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    return {
        "cpu_pct": round(cpu, 2),
        "frames_per_s_per_call": round((after[0] - before[0]) / seconds / users, 1),
        "decoded_per_call": after[1] / users,
    }


async def video_counts(url: str, clients: list[RTCTestClient]) -> tuple[int, int]:
    """Frames received and decoded by the server, over these calls' cameras."""
    frames = decoded = 0
    async with httpx.AsyncClient(base_url=url, timeout=5) as http:
        for client in clients:
            camera = (await http.get(f"/api/sessions/{client.pc_id}")).json().get("video") or {}
            frames += camera.get("camera", {}).get("frames", 0)
            decoded += camera.get("camera", {}).get("decoded", 0)
    return frames, decoded


def live(args: argparse.Namespace, vision: bool, folder: Path) -> dict[str, Any]:
    stub = start_stub(args, "Hello.", "hello")
    env = {"PARLEY_LLM_VISION": str(vision).lower(), "PARLEY_ECHO_CANCELLATION": "false"}
    server = start_target("parley", args, stub, folder / f"vision-{vision}.log", env)
    try:
        time.sleep(1.0)
        baseline = mean_cpu(server.proc.pid, 5.0)
        held = asyncio.run(hold_calls(server.url, args.users, server.proc.pid, args.seconds,
                                      args.fps))  # fmt: skip
    finally:
        server.stop()
        stub.stop()
    per_call = (held["cpu_pct"] - baseline) / args.users
    return {"vision": vision, "baseline_cpu_pct": round(baseline, 2), **held,
            "cpu_pct_per_call": round(per_call, 2)}  # fmt: skip


def clip(n: int) -> list[bytes]:
    """``n`` VP8 frames of the pattern (the first a keyframe), as the receiver gets them."""
    encoder = get_encoder(VP8)
    out = []
    for i, rgb in enumerate(pattern(n)):
        frame = VideoFrame.from_ndarray(rgb, format="rgb24")
        frame.pts, frame.time_base = i * 3000, fractions.Fraction(1, 90000)
        payloads, _ = encoder.encode(frame, force_keyframe=i == 0)
        out.append(b"".join(depayload(VP8, p) for p in payloads))
    return out


def ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "median_ms": round(1000 * statistics.median(ordered), 2),
        "p95_ms": round(1000 * p95, 2),
    }


def offline(fps: float) -> dict[str, Any]:
    frames = clip(90)
    decoder = av.CodecContext.create("vp8", "r")
    every: list[float] = []
    for data in frames:
        started = time.perf_counter()
        decoder.decode(av.Packet(data))
        every.append(time.perf_counter() - started)
    looks: list[float] = []
    keyframe = KeyframeDecoder()
    for _ in range(20):
        started = time.perf_counter()
        keyframe.decode("VP8", frames[0], 512)
        looks.append(time.perf_counter() - started)
    every_frame = ms(every)
    return {
        "decode_every_frame": {**every_frame,
                               "cpu_pct_at_fps": round(every_frame["median_ms"] * fps / 10, 1)},
        "one_look_keyframe_to_jpeg": ms(looks),
        "keyframe_bytes": len(frames[0]),
        "inter_frame_bytes_median": int(statistics.median(len(f) for f in frames[1:])),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--fps", type=float, default=30.0)
    args = parser.parse_args()
    if not 1 <= args.users <= 10 or not 1 <= args.seconds <= 120 or not 1 <= args.fps <= 60:
        parser.error("--users within 1..10, --seconds within 1..120, --fps within 1..60")
    # What start_stub / start_target read; the stub is never asked anything here.
    args.stt_delay = args.llm_delay = args.tts_delay = 0.0
    args.tts_seconds_per_char = 0.06
    args.vad_stop_secs, args.user_speech_timeout = 0.2, 0.6
    folder = Path(tempfile.mkdtemp(prefix="parley-video-"))
    results = {"users": args.users, "seconds": args.seconds, "fps": args.fps,
               "offline": offline(args.fps),
               "live": [live(args, False, folder), live(args, True, folder)]}  # fmt: skip
    off, on = results["live"]
    results["idle_video_track_cpu_pct_per_call"] = round(
        on["cpu_pct_per_call"] - off["cpu_pct_per_call"], 2
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
