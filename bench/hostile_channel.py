"""Hostile data-channel peers (issue 22, items 1, 3, 10a and 10b), against real servers on
127.0.0.1; every figure is what the server did. Each scenario gets a fresh server (so
that one scenario's heap does not hide the next one's growth) and a bystander session
whose echo must stay fast.

- **stall**: the client's SCTP stops acknowledging what the server sends (its SACKs are
  dropped) while it keeps pinging and asks for ``--echo-kb`` KB ``echo`` replies
  ``--echo-rate`` times a second, for up to ``--stall-seconds``: the server's RSS every
  5 s, and when (if) the session was closed, and why.
- **huge**: one text message of each of ``--huge-mb`` MB (the client ignores the 256 KB
  ``max-message-size`` the server advertises): the server's CPU seconds and RSS growth
  until it answered (an RTVI error) or aborted the association.
- **endless**: a message whose last fragment never comes, ``--endless-kbps`` KB/s for
  ``--endless-seconds``: the server's CPU (% of one core) in the first and the last two
  seconds (it grows with what is buffered when reassembly rescans it), RSS growth, and
  whether the association was aborted.
- **utf8**: a text message that is not UTF-8: what the client was told, whether the
  session still answers, and the server's ERROR lines and tracebacks.
- **channels**: ``--channels`` more data channels: how many the server opened, its RSS
  growth, and whether an ``echo`` on ``chat`` is still answered on ``chat``.

    .venv/bin/python -m bench.hostile_channel [--only stall,huge] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # --help and runs from any folder
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from aiortc import RTCDataChannel, RTCPeerConnection  # noqa: E402
from aiortc.rtcsctptransport import (  # noqa: E402
    SCTP_DATA_FIRST_FRAG,
    USERDATA_MAX_LENGTH,
    WEBRTC_STRING,
    DataChunk,
)

from server.process.proc import ProcReader  # noqa: E402
from testkit.measure import log_problems  # noqa: E402
from testkit.rtc_client import RTCTestClient  # noqa: E402
from testkit.server_process import ServerProcess  # noqa: E402

SCENARIOS = ("stall", "huge", "endless", "utf8", "channels")

# -- what a hostile client does to its own SCTP (aiortc's; the client side is ours to break) --


def stop_acknowledging(pc: RTCPeerConnection) -> None:
    """The peer's SCTP receives and delivers everything but never sends a SACK again:
    to the other side, nothing it sends is ever acknowledged."""
    sctp = pc.sctp
    assert sctp is not None

    async def no_sack() -> None:
        sctp._sack_needed = False

    sctp._send_sack = no_sack  # type: ignore[method-assign]


async def send_undecodable(channel: RTCDataChannel, payload: bytes = b'{"x": "\xff\xfe"}') -> None:
    """A text (PPID 51) message whose bytes are not UTF-8, which ``send`` cannot make."""
    sctp = channel.transport
    channel._addBufferedAmount(len(payload))  # as send() would: the flush takes it off
    sctp._data_channel_queue.append((channel, WEBRTC_STRING, payload))
    await sctp._data_channel_flush()


def send_huge(channel: RTCDataChannel, size: int) -> None:
    """One text message of ``size`` bytes, whatever the other side said it accepts."""
    channel.transport._remote_max_message_size = 0  # 0: "any size" (RFC 8841)
    channel.send("x" * size)


def _fragment(channel: RTCDataChannel, seq: int, first: bool) -> DataChunk:
    """A middle (or first) fragment of an ordered text message on ``channel``, with
    the bookkeeping aiortc's own ``_send`` gives a chunk."""
    sctp = channel.transport
    chunk = DataChunk()
    chunk.flags = SCTP_DATA_FIRST_FRAG if first else 0
    chunk.tsn = sctp._local_tsn
    chunk.stream_id = channel.id
    chunk.stream_seq = seq
    chunk.protocol = WEBRTC_STRING
    chunk.user_data = b"y" * USERDATA_MAX_LENGTH
    chunk._abandoned = chunk._acked = chunk._in_flight = chunk._retransmit = False
    chunk._book_size = len(chunk.user_data)
    chunk._expiry = chunk._max_retransmits = chunk._sent_time = None
    chunk._misses = chunk._sent_count = 0
    sctp._local_tsn = (sctp._local_tsn + 1) % 2**32
    return chunk


async def send_endless(channel: RTCDataChannel, seconds: float, kbps: float) -> int:
    """Fragments of one message that never ends, ``kbps`` KB/s for ``seconds`` (or until
    the association closes); returns the bytes queued."""
    sctp = channel.transport
    seq = sctp._outbound_stream_seq.get(channel.id, 0)
    sctp._outbound_stream_seq[channel.id] = (seq + 1) % 2**16
    per_tick = max(1, round(kbps * 1024 * 0.05 / USERDATA_MAX_LENGTH))
    sent, first = 0, True
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and sctp.state != "closed":
        for _ in range(per_tick):
            sctp._outbound_queue.append(_fragment(channel, seq, first))
            first = False
            sent += USERDATA_MAX_LENGTH
        await sctp._transmit()
        await asyncio.sleep(0.05)
    return sent


def aborts_heard(pc: RTCPeerConnection) -> list[bytes]:
    """Records the causes of every ABORT the peer's SCTP receives (the list returned)."""
    sctp = pc.sctp
    assert sctp is not None
    heard: list[bytes] = []
    receive = sctp._receive_chunk

    async def recording(chunk: Any) -> None:
        if type(chunk).__name__ == "AbortChunk":
            heard.append(b"".join(value for _, value in chunk.params) or b"(no cause)")
        await receive(chunk)

    sctp._receive_chunk = recording  # type: ignore[method-assign]
    return heard


# -- measuring ------------------------------------------------------------------------------


class Server:
    """A fresh server for one scenario, its figures read as the server reads its own."""

    def __init__(self, folder: Path, name: str, env: dict[str, str]) -> None:
        self.proc = ServerProcess(env, folder / f"{name}.log")
        self.url = self.proc.url
        self._reader = ProcReader(self.proc.proc.pid)

    def rss_mb(self) -> float:
        return (self._reader.read().rss_bytes or 0) / 2**20

    def cpu_s(self) -> float:
        return self._reader.read().cpu_seconds or 0.0

    async def open(self, pc_id: str) -> bool:
        async with httpx.AsyncClient(timeout=5) as http:
            return (await http.get(f"{self.url}/api/sessions/{pc_id}")).status_code == 200

    async def close_reason(self, pc_id: str) -> str | None:
        async with httpx.AsyncClient(timeout=5) as http:
            record = await http.get(f"{self.url}/api/sessions/{pc_id}/transcript")
        return record.json().get("close_reason") if record.status_code == 200 else None

    def log_errors(self) -> int:
        return int(log_problems(self.proc.log())["errors"])


async def echo_ms(client: RTCTestClient, within: float = 10.0) -> float | None:
    """An ``echo`` round trip in ms, or None when not answered within ``within`` s."""
    started = time.monotonic()
    try:
        await asyncio.wait_for(client.request("echo", {"n": 1}), within)
    except TimeoutError:
        return None
    return round(1000 * (time.monotonic() - started), 1)


async def with_pair(
    server: Server, body: Callable[[RTCTestClient, RTCTestClient], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    """Runs ``body(hostile, bystander)`` on two connected sessions; adds the bystander's
    echo time at the end and the server's ERROR lines."""
    hostile, bystander = RTCTestClient(server.url), RTCTestClient(server.url)
    try:
        await hostile.connect()
        await bystander.connect()
        figures = await body(hostile, bystander)
        figures["bystander_echo_ms"] = await echo_ms(bystander)
    finally:
        for client in (hostile, bystander):
            try:
                await asyncio.wait_for(client.close(), 10)
            except Exception as exc:  # a broken client must not stop the bench
                print(f"closing a client: {exc!r}", file=sys.stderr)
    figures["server_error_lines"] = server.log_errors()
    return figures


# -- the scenarios --------------------------------------------------------------------------


async def stall(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    async def body(hostile: RTCTestClient, _: RTCTestClient) -> dict[str, Any]:
        heard = aborts_heard(hostile.pc)
        stop_acknowledging(hostile.pc)
        payload = "e" * (args.echo_kb * 1000)
        start, rss0 = time.monotonic(), server.rss_mb()
        rss: list[float] = []
        closed_at, next_rss, next_check = None, start, start
        while time.monotonic() - start < args.stall_seconds:
            if time.monotonic() >= next_rss:
                rss.append(round(server.rss_mb() - rss0, 1))
                next_rss += 5.0
            if time.monotonic() >= next_check:
                next_check += 0.5
                if not await server.open(hostile.pc_id):
                    closed_at = time.monotonic() - start
                    break
            if hostile.channel.readyState == "open":
                hostile.send_rtvi("client-message", {"t": "echo", "d": payload})
            await asyncio.sleep(1 / args.echo_rate)
        return {
            "rss_growth_mb_every_5s": rss,
            "closed_after_s": None if closed_at is None else round(closed_at, 1),
            "close_reason": await server.close_reason(hostile.pc_id),
            "client_heard_abort": [c.decode(errors="replace") for c in heard],
        }

    return await with_pair(server, body)


async def huge(server: Server, size_mb: float) -> dict[str, Any]:
    async def body(hostile: RTCTestClient, _: RTCTestClient) -> dict[str, Any]:
        heard = aborts_heard(hostile.pc)
        cpu0, rss0, start = server.cpu_s(), server.rss_mb(), time.monotonic()
        send_huge(hostile.channel, int(size_mb * 2**20))
        outcome = "no answer in 60 s"
        while time.monotonic() - start < 60:
            if heard or hostile.pc.sctp.state == "closed":
                outcome = "association aborted"
                break
            if any("too large" in str(m.get("data")) for m in hostile.messages):
                outcome = "RTVI error: message too large"
                break
            await asyncio.sleep(0.05)
        return {
            "size_mb": size_mb,
            "outcome": outcome,
            "seconds": round(time.monotonic() - start, 2),
            "server_cpu_s": round(server.cpu_s() - cpu0, 2),
            "rss_growth_mb": round(server.rss_mb() - rss0, 1),
            "client_heard_abort": [c.decode(errors="replace") for c in heard],
        }

    return await with_pair(server, body)


async def endless(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    async def body(hostile: RTCTestClient, _: RTCTestClient) -> dict[str, Any]:
        heard = aborts_heard(hostile.pc)
        hostile.stop_pinging()  # a ping's TSN amid the fragments would end the message
        cpu: list[tuple[float, float]] = []  # (time, server CPU seconds) every second

        async def sample() -> None:
            while True:
                cpu.append((time.monotonic(), server.cpu_s()))
                await asyncio.sleep(1.0)

        rss0, start = server.rss_mb(), time.monotonic()
        sampler = asyncio.create_task(sample())
        try:
            sent = await send_endless(hostile.channel, args.endless_seconds, args.endless_kbps)
        finally:
            sampler.cancel()
        cpu.append((time.monotonic(), server.cpu_s()))
        return {
            "sent_kb": round(sent / 1024),
            "seconds": round(time.monotonic() - start, 1),
            "server_cpu_pct_first_2s": _cpu_pct(cpu[: min(3, len(cpu))]),
            "server_cpu_pct_last_2s": _cpu_pct(cpu[-3:]),
            "rss_growth_mb": round(server.rss_mb() - rss0, 1),
            "aborted": hostile.pc.sctp.state == "closed",
            "client_heard_abort": [c.decode(errors="replace") for c in heard],
        }

    return await with_pair(server, body)


def _cpu_pct(samples: list[tuple[float, float]]) -> float | None:
    """CPU % of one core between the first and last of ``samples``."""
    (t0, c0), (t1, c1) = samples[0], samples[-1]
    return round(100 * (c1 - c0) / (t1 - t0), 1) if t1 > t0 else None


async def utf8(server: Server) -> dict[str, Any]:
    async def body(hostile: RTCTestClient, _: RTCTestClient) -> dict[str, Any]:
        errors0 = server.log_errors()
        await send_undecodable(hostile.channel)
        await asyncio.sleep(2.0)
        told = [m["data"]["error"] for m in hostile.messages if m.get("type") == "error"]
        return {
            "client_told": told,
            "session_answers_ms": await echo_ms(hostile, 5.0),
            "session_open": await server.open(hostile.pc_id),
            "close_reason": await server.close_reason(hostile.pc_id),
            "new_error_lines": server.log_errors() - errors0,
            "task_exception_logged": "Task exception was never retrieved" in server.proc.log(),
        }

    return await with_pair(server, body)


async def channels(server: Server, count: int) -> dict[str, Any]:
    async def body(hostile: RTCTestClient, _: RTCTestClient) -> dict[str, Any]:
        rss0 = server.rss_mb()
        extra = [hostile.pc.createDataChannel(f"extra{i}") for i in range(count)]
        on_extra: list[str] = []
        for channel in extra:
            channel.on("message", on_extra.append)
        await asyncio.sleep(min(20.0, 2.0 + count / 200))
        opened = sum(1 for c in extra if c.readyState == "open")
        before = len(hostile.messages)
        reply = await echo_ms(hostile, 5.0)
        told = [m["data"]["error"] for m in hostile.messages if m.get("type") == "error"]
        return {
            "channels_asked": count,
            "opened_by_server": opened,
            "closed_by_server": sum(1 for c in extra if c.readyState in ("closing", "closed")),
            "rss_growth_mb": round(server.rss_mb() - rss0, 1),
            "echo_answered_on_chat_ms": reply,
            "replies_on_other_channels": len(on_extra),
            "messages_on_chat_meanwhile": len(hostile.messages) - before,
            "client_told": told[:2],
        }

    return await with_pair(server, body)


async def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    env: dict[str, str] = {}
    results: dict[str, Any] = {}
    for name in args.only:
        if name == "huge":
            results[name] = []
            for size in args.huge_mb:
                server = Server(folder, f"huge{size}", env)
                try:
                    results[name].append(await huge(server, size))
                finally:
                    server.proc.stop()
            continue
        server = Server(folder, name, env)
        try:
            if name == "stall":
                results[name] = await stall(server, args)
            elif name == "endless":
                results[name] = await endless(server, args)
            elif name == "utf8":
                results[name] = await utf8(server)
            else:
                results[name] = await channels(server, args.channels)
        finally:
            server.proc.stop()
    return results


def table(results: dict[str, Any]) -> str:
    rows = ["| scenario | figure | value |", "| --- | --- | --- |"]
    for name, figures in results.items():
        for part in figures if isinstance(figures, list) else [figures]:
            label = f"{name} {part.get('size_mb')} MB" if name == "huge" else name
            rows += [f"| {label} | {key} | {value} |" for key, value in part.items()]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    parser.add_argument("--stall-seconds", type=float, default=40.0)
    parser.add_argument("--echo-kb", type=int, default=60)
    parser.add_argument("--echo-rate", type=float, default=18.0)
    parser.add_argument("--huge-mb", default="4,12", help="comma-separated sizes in MB")
    parser.add_argument("--endless-seconds", type=float, default=20.0)
    parser.add_argument("--endless-kbps", type=float, default=500.0)
    parser.add_argument("--channels", type=int, default=2000)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    args.only = [s for s in args.only.split(",") if s]
    args.huge_mb = [float(s) for s in args.huge_mb.split(",") if s]
    if set(args.only) - set(SCENARIOS):
        parser.error(f"--only: choose among {', '.join(SCENARIOS)}")
    if not (1 <= args.stall_seconds <= 120 and 1 <= args.endless_seconds <= 60):
        parser.error("--stall-seconds within 1..120, --endless-seconds within 1..60")
    if not (all(0 < s <= 16 for s in args.huge_mb) and 1 <= args.channels <= 4000):
        parser.error("--huge-mb within 0..16, --channels within 1..4000")
    if not (1 <= args.echo_kb <= 63 and 0 < args.echo_rate <= 20):
        parser.error("--echo-kb within 1..63, --echo-rate within 0..20 (the message rate)")
    folder = Path(tempfile.mkdtemp(prefix="parley-hostile-channel-"))
    results = asyncio.run(run(args, folder))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(table(results))
    print(f"\nserver logs in {folder}")


if __name__ == "__main__":
    main()
