"""Hostile signalling (issue 22, items 4-6): one client starving the session slots, the
server probing addresses the client names, and the media-section limit bypassed.

Starts its own servers on 127.0.0.1 (models never load: no audio is spoken) with the
production defaults of the limits that the test environment turns off, and plays:

- ``slots``: offers that never complete ICE, from ten rotating addresses of one /24
  (127.0.0.2-11) at ``--rate`` per second, each kept "alive" by an empty PATCH every 2 s,
  for ``--duration`` s; in its second half a legitimate aiortc client from another /24
  (127.0.1.1) tries to connect every 3 s. Figures: slots the attacker held at most and at
  the end, the legitimate client's successes.
- ``starts``: 81 ``POST /start`` from the same ten addresses, then one from 127.0.1.1.
- ``keys``: with two API keys, the first floods offers and ``/start`` from 20 addresses
  in 20 /24s; a client with the second key then tries to connect.
- ``candidates``: candidates in the SDP toward UDP sockets this script binds on
  127.0.0.1 (the only targets it ever names): 300 in one offer; 200 in an offer then
  150 more in a renegotiation; ten renegotiations at once; 20 candidates to a server
  with ``PARLEY_ALLOW_PRIVATE_CANDIDATES=false``. Figures: targets that received a
  datagram from the server, and datagrams.
- ``sections``: a real offer plus ``--sections`` bundled audio sections whose lines end
  with a bare CR, U+0085 or U+2028: accepted or refused, sections in the answer.

Everything is bounded in count and time and goes to 127.0.0.1 only.

    .venv/bin/python bench/hostile_signalling.py [--only slots,starts,...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a file from any folder
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from server.settings import Settings  # noqa: E402
from testkit.rtc_client import RTCTestClient, split_candidates  # noqa: E402
from testkit.server_process import ServerProcess  # noqa: E402
from testkit.udp_targets import Target, targets, with_candidates  # noqa: E402

SCENARIOS = ("slots", "starts", "keys", "candidates", "sections")
ATTACKERS = [f"127.0.0.{i}" for i in range(2, 12)]  # ten addresses of one /24
LEGIT = "127.0.1.1"  # another /24
# Limits the test environment turns off (every test client is 127.0.0.1); the bench runs
# with their production defaults. Settings this version does not have are left out.
PRODUCTION = (
    "session_rate_per_minute",
    "session_burst",
    "max_sessions_per_address",
    "max_sessions_per_network",
    "max_pending_per_address",
    "max_pending_per_network",
)


def production_env(**extra: str) -> dict[str, str]:
    fields = Settings.model_fields
    env = {f"PARLEY_{n.upper()}": str(fields[n].default) for n in PRODUCTION if n in fields}
    env["PARLEY_LOG_LEVEL"] = "INFO"
    return env | {f"PARLEY_{k.upper()}": v for k, v in extra.items()}


@contextlib.contextmanager
def serving(**settings: str) -> Iterator[ServerProcess]:
    server = ServerProcess(production_env(**settings), Path(tempfile.mkdtemp()) / "server.log")
    try:
        yield server
    finally:
        server.stop()


def http_from(url: str, address: str, key: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(base_url=url, transport=transport, timeout=20, headers=headers)


async def bare_offer() -> str:
    """A real aiortc offer (audio, video, data channel; bundled), without candidates."""
    client = RTCTestClient("http://127.0.0.1:9")
    try:
        await client.pc.setLocalDescription(await client.pc.createOffer())
        return split_candidates(client.pc.localDescription.sdp)[0]
    finally:
        await client.close()


async def sessions_from(http: httpx.AsyncClient, addresses: list[str]) -> int:
    """How many of the server's sessions were opened from ``addresses``."""
    sessions = (await http.get("/api/sessions")).json()["sessions"]
    return sum(s["client"]["remote_addr"] in addresses for s in sessions)


async def legit_connect(
    url: str, key: str | None = None, address: str = LEGIT, session_id: str | None = None
) -> bool:
    """Whether an aiortc client from ``address`` gets a connected session (then hangs up)."""
    client = RTCTestClient(url)
    await client.http.aclose()
    client.http = http_from(url, address, key)
    try:
        async with asyncio.timeout(12):
            await client.connect(session_id=session_id)
        return True
    except (httpx.HTTPStatusError, TimeoutError):
        return False
    finally:
        await client.close()


# -- item 4: slots and /start ---------------------------------------------------------------


class Flood:
    """Offers that never complete ICE, each kept alive by empty PATCHes."""

    def __init__(self, url: str, sdp: str, addresses: list[str], key: str | None = None):
        self.sdp = sdp
        self.clients = [http_from(url, a, key) for a in addresses]
        self.statuses: dict[int, int] = {}
        self.held: dict[str, httpx.AsyncClient] = {}

    async def offer(self, http: httpx.AsyncClient) -> None:
        response = await http.post("/api/offer", json={"sdp": self.sdp, "type": "offer"})
        self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
        if response.status_code == 200:
            self.held[response.json()["pc_id"]] = http

    async def keep_alive(self) -> None:
        while True:
            await asyncio.sleep(2)
            for pc_id, http in list(self.held.items()):
                response = await http.patch("/api/offer", json={"pc_id": pc_id, "candidates": []})
                if response.status_code == 404:
                    del self.held[pc_id]

    async def run(self, rate: float, duration: float) -> None:
        keeper = asyncio.create_task(self.keep_alive())
        try:
            end = time.monotonic() + duration
            for http in itertools.cycle(self.clients):
                if time.monotonic() > end:
                    break
                await self.offer(http)
                await asyncio.sleep(1 / rate)
        finally:
            keeper.cancel()

    async def aclose(self) -> None:
        for http in self.clients:
            await http.aclose()


async def legit_tries(url: str, duration: float, key: str | None = None) -> tuple[int, int]:
    """Connection attempts every 3 s in the second half of ``duration`` (the flood has
    had the first half to fill the server): (successes, attempts)."""
    await asyncio.sleep(duration / 2)
    ok = tries = 0
    end = time.monotonic() + duration / 2
    while time.monotonic() < end:
        tries += 1
        ok += await legit_connect(url, key)
        await asyncio.sleep(3)
    return ok, tries


async def slots(args: argparse.Namespace) -> dict[str, Any]:
    sdp = await bare_offer()
    with serving() as server:
        flood = Flood(server.url, sdp, ATTACKERS)
        observer = http_from(server.url, "127.0.9.9")
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, await sessions_from(observer, ATTACKERS))
                await asyncio.sleep(0.5)

        watcher = asyncio.create_task(watch())
        try:
            _, (ok, tries) = await asyncio.gather(
                flood.run(args.rate, args.duration), legit_tries(server.url, args.duration)
            )
            held_at_end = await sessions_from(observer, ATTACKERS)
        finally:
            watcher.cancel()
            await flood.aclose()
            await observer.aclose()
    return {
        "attacker offers": json.dumps(flood.statuses),
        "attacker slots held, peak/end (of 20)": f"{peak}/{held_at_end}",
        "legitimate connects during flood": f"{ok}/{tries}",
    }


async def starts(args: argparse.Namespace) -> dict[str, Any]:
    with serving() as server:
        clients = [http_from(server.url, a) for a in ATTACKERS]
        statuses: dict[int, int] = {}
        try:
            for http in itertools.islice(itertools.cycle(clients), 81):
                code = (await http.post("/start", json={})).status_code
                statuses[code] = statuses.get(code, 0) + 1
            async with http_from(server.url, LEGIT) as legit:
                response = await legit.post("/start", json={})
            session_id = response.json().get("sessionId")
            connected = session_id and await legit_connect(server.url, session_id=session_id)
        finally:
            for http in clients:
                await http.aclose()
    return {
        "attacker /start x81": json.dumps(statuses),
        "legitimate /start": response.status_code,
        "legitimate connects with its /start id": "yes" if connected else "no",
    }


async def keys(args: argparse.Namespace) -> dict[str, Any]:
    sdp = await bare_offer()
    addresses = [f"127.0.{n}.2" for n in range(10, 30)]  # 20 addresses, 20 /24s
    with serving(api_keys="attacker-key,legit-key") as server:
        flood = Flood(server.url, sdp, addresses, key="attacker-key")
        statuses: dict[int, int] = {}
        try:
            await flood.run(rate=10, duration=min(args.duration, 6))
            for http in itertools.islice(itertools.cycle(flood.clients), 100):
                code = (await http.post("/start", json={})).status_code
                statuses[code] = statuses.get(code, 0) + 1
            async with http_from(server.url, "127.0.200.1", "legit-key") as legit:
                start = await legit.post("/start", json={})
            session_id = start.json().get("sessionId")
            connected = await legit_connect(server.url, "legit-key", "127.0.200.1", session_id)
        finally:
            await flood.aclose()
    return {
        "attacker-key offers": json.dumps(flood.statuses),
        "attacker-key /start x100": json.dumps(statuses),
        "legit-key /start": start.status_code,
        "legit-key connects": "yes" if connected else "no",
    }


# -- item 5: candidates ------------------------------------------------------------------------


def reached(group: list[tuple[int, Target]]) -> tuple[int, int]:
    return sum(p.datagrams > 0 for _, p in group), sum(p.datagrams for _, p in group)


def reset(group: list[tuple[int, Target]]) -> None:
    for _, target in group:
        target.datagrams = 0


async def post(http: httpx.AsyncClient, sdp: str, pc_id: str | None = None) -> httpx.Response:
    return await http.post("/api/offer", json={"sdp": sdp, "type": "offer", "pc_id": pc_id})


def outcome(response: httpx.Response) -> str:
    body = response.json()
    note = body.get("detail") if response.status_code == 200 else body.get("error")
    return f"{response.status_code}" + (f" ({note})" if note else "")


async def candidates(args: argparse.Namespace) -> dict[str, Any]:
    sdp = await bare_offer()
    wait = args.probe_seconds
    rows: dict[str, Any] = {}
    async with targets(350) as group:
        with serving() as server:
            async with http_from(server.url, "127.0.0.1") as http:
                one = await post(http, with_candidates(sdp, [p for p, _ in group[:300]]))
                await asyncio.sleep(wait)
                rows["300 in one offer: answer"] = outcome(one)
                rows["300 in one offer: targets, datagrams"] = "{}, {}".format(*reached(group))
                if one.status_code == 200:
                    await http.delete(f"/api/sessions/{one.json()['pc_id']}")
                await asyncio.sleep(1)
                reset(group)
                first = await post(http, with_candidates(sdp, [p for p, _ in group[:200]]))
                pc_id = first.json().get("pc_id")
                more = await post(http, with_candidates(sdp, [p for p, _ in group]), pc_id)
                await asyncio.sleep(wait)
                rows["200 then 150 more: answers"] = f"{outcome(first)}; {outcome(more)}"
                rows["200 then 150 more: targets, datagrams"] = "{}, {}".format(*reached(group))
                burst = await asyncio.gather(*(post(http, sdp, pc_id) for _ in range(10)))
                codes = [r.status_code for r in burst]
                rows["10 renegotiations at once"] = json.dumps(
                    {c: codes.count(c) for c in sorted(set(codes))}
                )
        await asyncio.sleep(1)  # read what arrived while stopping the server blocked the loop
        reset(group)
        with serving(allow_private_candidates="false") as server:
            async with http_from(server.url, "127.0.0.1") as http:
                refused = await post(http, with_candidates(sdp, [p for p, _ in group[:20]]))
                await asyncio.sleep(wait)
        rows["20 to refused ranges: answer"] = outcome(refused)
        rows["20 to refused ranges: targets, datagrams"] = "{}, {}".format(*reached(group))
    return rows


# -- item 6: media sections ----------------------------------------------------------------------


def many_sections(sdp: str, count: int, separator: str) -> str:
    """``sdp`` plus ``count`` audio sections in its bundle, their lines ended by ``separator``."""
    lines = sdp.splitlines()
    media = next(i for i, line in enumerate(lines) if line.startswith("m="))
    kinds = ("a=ice-ufrag", "a=ice-pwd", "a=fingerprint", "a=setup")
    copied = [next(line for line in lines[media:] if line.startswith(k)) for k in kinds]
    mids = [f"x{n}" for n in range(count)]
    lines = [
        line + " " + " ".join(mids) if line.startswith("a=group:BUNDLE") else line for line in lines
    ]
    head = ["m=audio 9 UDP/TLS/RTP/SAVPF 111", "c=IN IP4 0.0.0.0"]
    tail = [*copied, "a=rtcp-mux", "a=rtpmap:111 opus/48000/2", "a=sendrecv"]
    extra = "".join(separator.join([*head, f"a=mid:{mid}", *tail]) + separator for mid in mids)
    return "\r\n".join(lines) + "\r\n" + extra


async def sections(args: argparse.Namespace) -> dict[str, Any]:
    sdp = await bare_offer()
    rows: dict[str, Any] = {}
    with serving() as server:
        async with http_from(server.url, "127.0.0.1") as http:
            for name, separator in [("CR", "\r"), ("U+0085", "\x85"), ("U+2028", "\u2028")]:
                started = time.monotonic()
                response = await post(http, many_sections(sdp, args.sections, separator))
                took = time.monotonic() - started
                if response.status_code == 200:
                    answer = response.json()["sdp"]
                    count = sum(line.startswith("m=") for line in answer.splitlines())
                    size = len(answer.encode())
                    rows[f"{name}: answer"] = f"200, {count} sections, {size} bytes, {took:.1f} s"
                    await http.delete(f"/api/sessions/{response.json()['pc_id']}")
                else:
                    rows[f"{name}: answer"] = outcome(response)
    return rows


def scenario_parser(doc: str | None, scenarios: tuple[str, ...]) -> argparse.ArgumentParser:
    """A bench's command line: ``--only`` (its scenarios) and ``--json``; add its own."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default=",".join(scenarios), help="scenarios, comma-separated")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def run_scenarios(parser: argparse.ArgumentParser, scenarios: tuple[str, ...],
                  namespace: dict[str, Any]) -> None:  # fmt: skip
    """Run the chosen scenarios (coroutines named as they are, in ``namespace``) and print
    their figures as one table, or JSON."""
    args = parser.parse_args()
    chosen = [s for s in args.only.split(",") if s]
    unknown = set(chosen) - set(scenarios)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}; choose from {scenarios}")
    results = {name: asyncio.run(namespace[name](args)) for name in chosen}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print("\n| scenario | figure | value |\n| --- | --- | --- |")
    for name, rows in results.items():
        for figure, value in rows.items():
            print(f"| {name} | {figure} | {value} |")


def main() -> None:
    parser = scenario_parser(__doc__, SCENARIOS)
    parser.add_argument("--duration", type=float, default=30.0, help="s of offer flood (slots)")
    parser.add_argument("--rate", type=float, default=2.5, help="attacker offers per second")
    parser.add_argument("--probe-seconds", type=float, default=10.0, help="s to count probes")
    parser.add_argument("--sections", type=int, default=40, help="extra audio sections")
    run_scenarios(parser, SCENARIOS, globals())


if __name__ == "__main__":
    main()
