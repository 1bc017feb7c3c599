"""Hostile clients on the WebSocket doors (issue 42, items 1, 4, 6, 7): what a client with
no key can make the server hold, compute and log.

Starts its own servers on 127.0.0.1 (models never load) with API keys and a Twilio auth
token, so that neither door is open, and plays:

- ``pings``: ``--sockets`` clients with no key, each from its own address, flood ``/ws``
  (then ``/telephony/ws``) with 125-byte pings for ``--seconds`` s and never read (a 4 KB
  receive buffer). Figures: the server's RSS before, at its peak and 10 s after, per
  socket; its CPU; ``/health`` latency meanwhile (from another address); how many of the
  sockets the server had ended by 10 s after the flood.
- ``silent``: ``--silent`` silent ``/telephony/ws`` sockets from one address that never
  send a start: how many the server accepted and held at once, ``/health`` meanwhile.
- ``tracebacks``: 60 sockets with no key sending what a strict reader refuses (JSON
  nested 50,000 deep, an Exotel rate of ``'²'``), a Twilio webhook whose CallSid is 200
  bytes: ``Traceback`` and ``ERROR`` lines in the server's log.
- ``media``: one admitted phone call (an open server this time) sending 64 KB media
  messages 100 times a second for ``--seconds`` s: the server's CPU.
- ``keys``: a ``/ws`` call with ``?api_key=`` and a stream with ``?token=``: whether the
  secrets reach the log.

Everything is bounded in count and time and goes to 127.0.0.1 only.

    .venv/bin/python bench/hostile_sockets.py [--only pings,silent,...]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a file from any folder
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.hostile_signalling import serving  # noqa: E402
from server.telephony.signature import twilio_signature  # noqa: E402
from testkit.raw_websocket import PING, TEXT, RawWebSocket, frame  # noqa: E402
from testkit.server_process import ServerProcess  # noqa: E402

SCENARIOS = ("pings", "silent", "tracebacks", "media", "keys")
KEY = "k1-secret-aaaa"
TWILIO_TOKEN = "twilio-auth-token-bench"
PUBLIC = "https://agent.example.com"
OBSERVER = "127.0.1.1"  # /health from another /24


def locked(**more: str) -> dict[str, str]:
    """A server that takes calls only with a key or a stream token."""
    return {"api_keys": json.dumps([KEY]), "public_url": PUBLIC,
            "twilio_auth_token": TWILIO_TOKEN, **more}  # fmt: skip


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


class Watch:
    """The server's RSS and ``/health`` latency, sampled every 0.25 s while it runs."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.rss: list[float] = []
        self.health: list[tuple[float, int]] = []  # (seconds, status)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Watch:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        transport = httpx.AsyncHTTPTransport(local_address=OBSERVER)
        async with httpx.AsyncClient(transport=transport, timeout=30) as http:
            while True:
                self.rss.append(rss_mb(self.server.proc.pid))
                started = time.monotonic()
                try:
                    status = (await http.get(f"{self.server.url}/health")).status_code
                except httpx.HTTPError:
                    status = 0
                self.health.append((time.monotonic() - started, status))
                await asyncio.sleep(0.25)

    def summary(self) -> str:
        times = sorted(t * 1000 for t, _ in self.health) or [0.0]
        bad = sum(status != 200 for _, status in self.health)
        return (f"/health p50 {statistics.median(times):.0f} ms, max {times[-1]:.0f} ms, "
                f"{bad}/{len(self.health)} not 200")  # fmt: skip


# -- item 1: pings that are never read ---------------------------------------------------


async def flood(sock: RawWebSocket, until: float, opcode: int = PING) -> int:
    """Pings (or empty text messages) until ``until``; how many were sent (the server may
    end it first)."""
    burst = frame(opcode, b"p" * 125 if opcode == PING else b"") * 64
    sent = 0
    with contextlib.suppress(OSError, asyncio.TimeoutError):
        while time.monotonic() < until:
            await asyncio.wait_for(sock.send(burst), max(0.01, until - time.monotonic()))
            sent += 64
    return sent


async def pings(sockets: int, seconds: float) -> None:
    doors = [("/ws", PING), ("/telephony/ws", PING), (f"/ws?api_key={KEY}", PING),
             (f"/ws?api_key={KEY}", TEXT)]  # fmt: skip
    for path, opcode in doors:
        with serving(**locked()) as server:
            pid = server.proc.pid
            await asyncio.sleep(1.0)
            before, fds_before = rss_mb(pid), open_fds(pid)
            clients = [RawWebSocket() for _ in range(sockets)]
            statuses = [
                await c.open(
                    "127.0.0.1", server.port, path, source=f"127.0.0.{2 + i}", receive_buffer=4096
                )
                for i, c in enumerate(clients)
            ]
            cpu0, t0 = cpu_seconds(pid), time.monotonic()
            async with Watch(server) as watch:
                sent = await asyncio.gather(*(flood(c, t0 + seconds, opcode) for c in clients))
                lasted = time.monotonic() - t0
                peak = max(watch.rss)
                await asyncio.sleep(10.0)  # the clients hold on, reading nothing
                cpu = cpu_seconds(pid) - cpu0
            after, fds_after = rss_mb(pid), open_fds(pid)
            ended = sum(await asyncio.gather(*(c.closed_by_server(1.0) for c in clients)))
            for c in clients:
                c.abort()
            what = "pings" if opcode == PING else "empty messages"
            print(
                f"{what} {path}: upgrade statuses {sorted(set(statuses))}, "
                f"{sum(sent)} sent; RSS {before:.0f} -> peak {peak:.0f} -> "
                f"{after:.0f} MB 10 s after ({(peak - before) / sockets:.1f} MB per socket "
                f"at peak); flood lasted {lasted:.1f} s, server CPU {cpu:.2f} s; "
                f"{watch.summary()}; "
                f"fds {fds_before} -> {fds_after}; ended by the server: {ended}/{sockets}"
            )


# -- item 1: silent sockets before their start -------------------------------------------


async def silent(count: int) -> None:
    with serving(**locked()) as server:
        clients: list[RawWebSocket] = []
        statuses: dict[int, int] = {}
        async with Watch(server) as watch:
            for _ in range(count):
                client = RawWebSocket()
                try:
                    status = await client.open("127.0.0.1", server.port, "/telephony/ws",
                                               source="127.0.0.2", within=3)  # fmt: skip
                except (OSError, TimeoutError, ValueError, IndexError):
                    status = 0
                statuses[status] = statuses.get(status, 0) + 1
                clients.append(client)
            await asyncio.sleep(3.0)
            held = open_fds(server.proc.pid)
        for c in clients:
            c.abort()
        print(
            f"silent: {count} pre-start /telephony/ws sockets from one address: "
            f"statuses {statuses}; server fds while held {held}; {watch.summary()}"
        )


# -- item 4: tracebacks from client input ------------------------------------------------


def log_counts(server: ServerProcess) -> tuple[int, int]:
    text = server.log()
    errors = sum(ln.startswith("ERROR:") or "| ERROR" in ln for ln in text.splitlines())
    return text.count("Traceback"), errors


async def tracebacks() -> None:
    exotel_start = {"event": "start", "stream_sid": "s1", "start": {
        "stream_sid": "s1", "call_sid": "c1",
        "media_format": {"encoding": "base64", "sample_rate": "²"}}}  # fmt: skip
    messages = ["[" * 50_000 + "]" * 50_000, json.dumps(exotel_start)]
    with serving(**locked()) as server:
        for i in range(60):
            client = RawWebSocket()
            await client.open("127.0.0.1", server.port, "/telephony/ws", source="127.0.0.2")
            with contextlib.suppress(OSError):
                await client.send(frame(TEXT, messages[i % 2].encode()))
                await client.closed_by_server(3.0)
            client.abort()
        form = {"CallSid": "CA" + "x" * 198, "From": "+14155550100"}
        url = f"{PUBLIC}/telephony/twiml"
        signature = twilio_signature(TWILIO_TOKEN, url, form)
        async with httpx.AsyncClient(base_url=server.url) as http:
            answer = await http.post("/telephony/twiml", data=form,
                                     headers={"X-Twilio-Signature": signature})  # fmt: skip
        await asyncio.sleep(0.5)
        found, errors = log_counts(server)
        print(
            f"tracebacks: 60 sockets (deep JSON, Exotel rate '²'), a 200-byte CallSid "
            f"(answered {answer.status_code}): {found} tracebacks, {errors} ERROR lines"
        )


# -- item 6: media faster than real time ---------------------------------------------------


async def media(seconds: float) -> None:
    payload = base64.b64encode(b"\xff" * 48_000).decode()  # 6 s of μ-law: 64 KB as base64
    media_format = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
    start = {"event": "start", "streamSid": "MZ1", "start": {
        "streamSid": "MZ1", "callSid": "CA1", "customParameters": {},
        "mediaFormat": media_format}}  # fmt: skip
    message = frame(TEXT, json.dumps({"event": "media", "streamSid": "MZ1",
                                      "media": {"payload": payload}}).encode())  # fmt: skip
    with serving(public_url=PUBLIC) as server:
        pid = server.proc.pid
        client = RawWebSocket()
        await client.open("127.0.0.1", server.port, "/telephony/ws")
        await client.send(frame(TEXT, json.dumps({"event": "connected"}).encode()))
        await client.send(frame(TEXT, json.dumps(start).encode()))
        await asyncio.sleep(0.5)
        cpu0, t0, sent = cpu_seconds(pid), time.monotonic(), 0
        with contextlib.suppress(OSError):
            while time.monotonic() - t0 < seconds:
                await client.send(message)
                sent += 1
                await asyncio.sleep(max(0.0, t0 + sent / 100 - time.monotonic()))
        cpu = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0) * 100
        async with httpx.AsyncClient(base_url=server.url) as http:
            sessions = (await http.get("/api/sessions")).json()["sessions"]
        client.abort()
        dropped = [s.get("audio_packets_dropped") for s in sessions]
        print(
            f"media: {sent} messages of 64 KB in {seconds:g} s ({sent * 6 / seconds:.0f} s "
            f"of audio a second): server CPU {cpu:.0f} % of a core; frames dropped {dropped}"
        )


# -- item 7: secrets in the log ------------------------------------------------------------


async def keys() -> None:
    token = "tok-secret-cccc"
    with serving(**locked(log_level="INFO")) as server:
        for path in (f"/ws?api_key={KEY}", f"/telephony/ws?token={token}"):
            client = RawWebSocket()
            with contextlib.suppress(OSError, TimeoutError):
                await client.open("127.0.0.1", server.port, path)
                await client.closed_by_server(1.0)
            client.abort()
        await asyncio.sleep(0.5)
        text = server.log()
        print(
            f"keys: the API key in the log {text.count(KEY)} times, the token "
            f"{text.count(token)} times"
        )


async def main(args: argparse.Namespace) -> None:
    only = args.only.split(",") if args.only else SCENARIOS
    if "pings" in only:
        await pings(args.sockets, args.seconds)
    if "silent" in only:
        await silent(args.silent)
    if "tracebacks" in only:
        await tracebacks()
    if "media" in only:
        await media(args.seconds)
    if "keys" in only:
        await keys()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help=f"comma-separated, of {', '.join(SCENARIOS)}")
    parser.add_argument("--sockets", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--silent", type=int, default=1000)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(main(parser.parse_args()))
