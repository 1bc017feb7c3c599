"""Hostile media and HTTP clients (issue 22, items 7, 8, 10c-e), against real servers on
127.0.0.1; every figure is what the server did.

- **rtp**: one connected aiortc client sends its microphone's Opus packets at rising rates
  (``--rates``, packets per second, each for ``--seconds``; 20 ms Opus is 50/s). Per
  rate: packets sent, frames the server decoded per second (``audio_frames_in``),
  packets it dropped (``audio_packets_dropped``, where the server counts them), the
  server's CPU (% of one core, from ``/proc``) and whether the session still answers.
- **slow**: ``--slow`` connections from 127.0.0.2 each send half a request head and hold
  it; after ``--slow-wait`` s, how many are still open, what the closed ones were told,
  and a legitimate ``GET /health`` from 127.0.0.1 meanwhile (status, time).
- **health**: with API keys set, the fields an anonymous ``/health`` and ``/ready`` show.
- **host**: ``GET /api/history`` with ``Host: rebind.attacker.example`` (open default).
- **forwarded**: with a limit of one new session per address, ``--forwarded`` ``/start``
  calls from 127.0.0.1, each with its own ``X-Forwarded-For``: how many got in.

    .venv/bin/python -m bench.hostile_media [--rates 50,500,1000,2500] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # --help and runs from any folder
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from aiortc import MediaStreamTrack  # noqa: E402
from aiortc.mediastreams import MediaStreamError  # noqa: E402
from av import Packet  # noqa: E402

from server.media.opus import OpusEncoder  # noqa: E402
from server.process.proc import ProcReader  # noqa: E402
from testkit.rtc_client import RTCTestClient  # noqa: E402
from testkit.server_process import ServerProcess  # noqa: E402

FRAME_SAMPLES = 960  # 20 ms at 48 kHz
ATTACKER = "127.0.0.2"  # the slow clients' source address (Linux routes all of 127/8)
HALF_HEAD = b"POST /api/offer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 900\r\n"


class FloodTrack(MediaStreamTrack):
    """A microphone that sends 20 ms Opus packets (a tone in noise: real decoding work)
    at ``rate`` packets per second, with the timestamps of a steady 50/s stream."""

    kind = "audio"

    def __init__(self, rate: float = 50.0) -> None:
        super().__init__()
        self.rate = rate
        self.sent = 0
        encoder = OpusEncoder()
        rng = np.random.default_rng(7)
        t = np.arange(50 * FRAME_SAMPLES) / 48000
        signal = 6000 * np.sin(2 * np.pi * 220 * t) + rng.normal(0, 800, t.size)
        pcm = np.clip(signal, -32768, 32767).astype(np.int16)
        self._payloads = [
            bytes(encoder.encode(pcm[i : i + FRAME_SAMPLES].tobytes(), i))
            for i in range(0, pcm.size, FRAME_SAMPLES)
        ]
        self._due = time.monotonic()

    async def recv(self) -> Packet:  # type: ignore[override]
        if self.readyState != "live":
            raise MediaStreamError
        self._due = max(self._due + 1 / self.rate, time.monotonic() - 0.1)
        await asyncio.sleep(max(0.0, self._due - time.monotonic()))
        packet = Packet(self._payloads[self.sent % len(self._payloads)])
        packet.pts = self.sent * FRAME_SAMPLES
        packet.time_base = Fraction(1, 48000)
        self.sent += 1
        return packet


async def _session_info(http: httpx.AsyncClient, pc_id: str) -> dict[str, Any]:
    return (await http.get(f"/api/sessions/{pc_id}")).json()


async def rtp_flood(server: ServerProcess, rates: list[float], seconds: float) -> list[dict]:
    """One session; its microphone at each rate in turn, with the server's figures."""
    client = RTCTestClient(server.url)
    flood = FloodTrack()
    rows: list[dict] = []
    reader = ProcReader(server.proc.pid)
    try:
        await client.connect()
        client.pc.getTransceivers()[0].sender.replaceTrack(flood)
        http = client.http
        await asyncio.sleep(1.0)
        for rate in rates:
            flood.rate = rate
            await asyncio.sleep(0.5)  # the new rate under way
            before = await _session_info(http, client.pc_id)
            cpu0, sent0, t0 = reader.read().cpu_seconds or 0.0, flood.sent, time.monotonic()
            await asyncio.sleep(seconds)
            after = await _session_info(http, client.pc_id)
            cpu1, sent1, t1 = reader.read().cpu_seconds or 0.0, flood.sent, time.monotonic()
            answered = await _answers(client)
            span = t1 - t0
            decoded = after["audio_frames_in"] - before["audio_frames_in"]
            rows.append({
                "rate_asked": rate,
                "sent_per_s": round((sent1 - sent0) / span),
                "decoded_per_s": round(decoded / span),
                "dropped_per_s": _dropped(before, after, span),
                "server_cpu_pct": round(100 * (cpu1 - cpu0) / span, 1),
                "session_answers": answered,
            })  # fmt: skip
        errors = [m for m in client.messages if m.get("type") == "error"]
        rows.append({"rtvi_errors_told": len(errors), "first": errors[0] if errors else None})
    finally:
        await client.close()
    return rows


def _dropped(before: dict, after: dict, span: float) -> int | str:
    if "audio_packets_dropped" not in after:
        return "n/a"
    return round((after["audio_packets_dropped"] - before["audio_packets_dropped"]) / span)


async def _answers(client: RTCTestClient) -> bool:
    try:
        reply = await asyncio.wait_for(client.request("session-info"), 10)
    except TimeoutError:
        return False
    return reply.get("type") != "error-response"


def _half_sent(port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind((ATTACKER, 0))
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    sock.sendall(HALF_HEAD)
    sock.setblocking(False)
    return sock


def _state(sock: socket.socket) -> str:
    """open (nothing came back), or what the server said before it closed."""
    try:
        data = sock.recv(4096)
    except BlockingIOError:
        return "open"
    except ConnectionError:
        return "reset"
    if not data:
        return "closed"
    return data.split(b"\r\n", 1)[0].decode(errors="replace")


def slow_http(server: ServerProcess, count: int, wait: float) -> dict[str, Any]:
    """``count`` half-sent requests held from one address, and a legitimate request."""
    socks, refused = [], 0
    for _ in range(count):
        try:
            socks.append(_half_sent(server.port))
        except OSError:
            refused += 1
    time.sleep(0.5)
    started = time.monotonic()
    try:
        legit = httpx.get(f"{server.url}/health", timeout=10)
        legit_status: Any = legit.status_code
    except httpx.HTTPError as exc:
        legit_status = type(exc).__name__
    legit_ms = round(1000 * (time.monotonic() - started), 1)
    time.sleep(max(0.0, wait - 0.5))
    states: dict[str, int] = {}
    for sock in socks:
        state = _state(sock)
        states[state] = states.get(state, 0) + 1
        sock.close()
    return {
        "half_sent": count,
        "refused_at_connect": refused,
        "after_s": wait,
        "still_open": states.pop("open", 0),
        "closed_with": states,
        "legit_status": legit_status,
        "legit_ms": legit_ms,
    }


def small_ones(open_server: ServerProcess, keyed: ServerProcess, starts: int) -> dict:
    """Anonymous /health and /ready with keys, a rebinding Host, forwarded addresses."""
    health = httpx.get(f"{keyed.url}/health", timeout=5).json()
    ready = httpx.get(f"{keyed.url}/ready", timeout=5).json()
    rebind = httpx.get(
        f"{open_server.url}/api/history", headers={"Host": "rebind.attacker.example"}, timeout=5
    )
    accepted = 0
    auth = {"Authorization": "Bearer bench-key"}
    for n in range(starts):
        headers = {**auth, "X-Forwarded-For": f"203.0.113.{n + 1}"}
        if httpx.post(f"{keyed.url}/start", json={}, headers=headers, timeout=5).is_success:
            accepted += 1
    return {
        "anonymous_health_fields": sorted(health),
        "anonymous_health_shows_storage": "storage" in health,
        "anonymous_ready_fields": sorted(ready),
        "rebind_host_history_status": rebind.status_code,
        "forwarded_starts_sent": starts,
        "forwarded_starts_accepted_limit_1": accepted,
    }


def _log(folder: Path, name: str) -> Path:
    (folder / name).mkdir()
    return folder / name / "server.log"


def _table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    keys = [k for k in rows[0]]
    widths = {k: max(len(k), *(len(str(r.get(k, ""))) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for row in rows:
        print("  ".join(str(row.get(k, "")).ljust(widths[k]) for k in keys))


async def main(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="hostile-media-"))
    results: dict[str, Any] = {}
    open_server = ServerProcess({}, _log(folder, "open"))
    try:
        rates = [float(r) for r in args.rates.split(",")]
        results["rtp"] = await rtp_flood(open_server, rates, args.seconds)
        results["slow"] = slow_http(open_server, args.slow, args.slow_wait)
        keyed = ServerProcess(
            {"PARLEY_API_KEYS": "bench-key", "PARLEY_SESSION_RATE_PER_MINUTE": "1",
             "PARLEY_SESSION_BURST": "1"},
            _log(folder, "keyed"),
        )  # fmt: skip
        try:
            results["small"] = small_ones(open_server, keyed, args.forwarded)
        finally:
            keyed.stop()
    finally:
        open_server.stop()
    errors = [ln for ln in open_server.log().splitlines() if "ERROR" in ln or "Traceback" in ln]
    results["server_error_lines"] = len(errors)
    return results


def report(results: dict[str, Any]) -> None:
    rtp = [r for r in results["rtp"] if "rate_asked" in r]
    _table("RTP flood (one session)", rtp)
    told = results["rtp"][-1]
    print(f"  RTVI errors told to the flooding client: {told['rtvi_errors_told']}")
    slow = results["slow"]
    _table("Slow HTTP (half-sent request heads from 127.0.0.2)", [slow])
    _table("Small ones", [{k: v for k, v in results["small"].items() if "fields" not in k}])
    for key in ("anonymous_health_fields", "anonymous_ready_fields"):
        print(f"  {key}: {', '.join(results['small'][key])}")
    print(f"\nserver ERROR/Traceback lines: {results['server_error_lines']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="50,500,1000,2500", help="packets/s, in turn")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per rate")
    parser.add_argument("--slow", type=int, default=200, help="half-sent requests")
    parser.add_argument("--slow-wait", type=float, default=15.0, help="seconds held")
    parser.add_argument("--forwarded", type=int, default=5, help="/start calls, each XFF")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    arguments = parser.parse_args()
    figures = asyncio.run(main(arguments))
    report(figures)
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=2, default=str))
