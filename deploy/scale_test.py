"""``make scale-test``: two Parley replicas (r1, r2) behind HAProxy, checked with real WebRTC
clients.

Starts the OpenAI-compatible stub (STT, LLM and TTS: fast and deterministic), two
``python -m server`` processes with their own ``PARLEY_REPLICA_ID``, port and data folder,
and HAProxy with ``deploy/haproxy/haproxy.cfg`` as shipped, all on 127.0.0.1, and stops
them all at the end, also on failure. Through HAProxy, it checks that:

1. the official client's flow (``POST /start``, then ``POST``/``PATCH
   /sessions/{id}/api/offer``) and a plain one (``POST /api/offer``, ``PATCH /api/offer``
   with the pc_id in the body, a renegotiating ``POST /api/offer``) land every request on
   the replica that owns the session (ids, each replica's own view, HAProxy's log), and new
   sessions spread over both replicas;
2. SIGTERM drains r1: ``/ready`` 503, HAProxy marks it down, new sessions all go to r2, r1's
   calls keep working (a spoken turn, a renegotiation) and end, then r1 exits;
3. a replacement r1 (same id, same address) gets new sessions again;
4. SIGKILL on r2: requests for its sessions get HAProxy's 503 at once, and its clients
   reconnect on r1.

With ``--postgres`` (``make scale-test-postgres``) both replicas keep their transcripts in
one throwaway PostgreSQL (``testkit.postgres_server``) instead of a SQLite file each, and:

5. through HAProxy, whichever replica answers, ``GET /api/history`` pages through every
   call of both replicas (the replacement r1 closed only r1's records at its start).

Prints each check; exits 1 on the first that fails (with the logs' tails), 0 when all hold.

    .venv/bin/python -m deploy.scale_test [--keep] [--postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from types import FrameType

import httpx

from deploy.scale_calls import (
    Call,
    Failure,
    check,
    close_all,
    health,
    ok,
    open_call,
    open_calls,
    owner,
    session_status,
    spoken_turn,
    until,
)  # fmt: skip
from testkit.haproxy import CONFIG, HAProxyProcess
from testkit.openai_stub import OpenAIStub
from testkit.postgres_server import PostgresServer
from testkit.replicas import Cluster, kill_on_signals
from testkit.speech import make_speech

GRACE_SECONDS = 20.0  # r1's drain: its calls may run this long after SIGTERM
ENV = {
    "PARLEY_SHUTDOWN_GRACE_SECONDS": str(GRACE_SECONDS),
    # Short, fixed turn ends: a spoken turn takes about 2 s.
    "PARLEY_TURN_END": "fixed",
    "PARLEY_VAD_STOP_SECS": "0.2",
    "PARLEY_USER_SPEECH_TIMEOUT": "0.6",
}
TIMEOUT = 150.0  # the whole scenario


def spread(calls: list[Call]) -> dict[str, int]:
    return dict(sorted(Counter(c.replica for c in calls).items()))


async def owners_view(cluster: Cluster, calls: list[Call]) -> None:
    """Each call answers through HAProxy, on its own replica, and 404 on every other."""
    for call in calls:
        status, body = await session_status(cluster.url, call.pc_id)
        check(status == 200, f"GET /api/sessions/{call.pc_id} through HAProxy: {status} {body}")
        if call.session_id:
            check(json.loads(body)["session_id"] == call.session_id, f"{call.pc_id}: {body}")
        for rid, replica in cluster.replicas.items():
            if replica.running:
                status, _ = await session_status(replica.url, call.pc_id)
                wanted = 200 if rid == call.replica else 404
                check(status == wanted, f"{call.pc_id} on {rid} directly: {status}, not {wanted}")


async def active_counts(cluster: Cluster, calls: list[Call]) -> dict[str, int]:
    """Each running replica's /health ``sessions_active`` equals the calls it owns."""
    counts = {}
    for rid, replica in cluster.replicas.items():
        if not replica.running:
            continue
        owned = sum(1 for c in calls if c.replica == rid)
        deadline = time.monotonic() + 5
        while (active := (await health(replica.url))["sessions_active"]) != owned:
            check(time.monotonic() < deadline, f"{rid}: {active} sessions active, not {owned}")
            await asyncio.sleep(0.1)
        counts[rid] = active
    return counts


def audit_log(haproxy: HAProxyProcess, calls: list[Call], replicas: set[str]) -> str:
    """Every request HAProxy logged that names a session went to the session's replica."""
    ids = {i for c in calls for i in c.ids()}
    by_path = by_body = 0
    for r in haproxy.requests():
        # In the path, not the query: the history's before_id cursor names no session.
        named = [i for i in ids if i in r.path.split("?", 1)[0]]
        for an_id in named:
            check(r.owner == owner(an_id), f"{r.method} {r.path}: owner read as {r.owner}")
        if r.path == "/api/offer" and r.method == "PATCH":
            check(r.owner in replicas, f"PATCH /api/offer routed without an owner: {r}")
        if r.owner in replicas:
            check(r.backend == f"replica_{r.owner}", f"{r.method} {r.path} went to {r.backend}")
            dead = r.server == "<NOSRV>" and r.status == 503
            check(r.server == r.owner or dead, f"{r.method} {r.path} served by {r.server}")
            by_path, by_body = by_path + bool(named), by_body + (r.path == "/api/offer")
    return f"{by_path} routed by the id in the path, {by_body} by the pc_id in the body"


async def routing(cluster: Cluster) -> list[Call]:
    print("1. routing by id, and new sessions spread (4 /start calls, 4 /api/offer calls)")
    # Round robin among idle replicas alternates: each replica gets both flows.
    calls = await open_calls(cluster.url, ["start", "start", "offer", "offer"] * 2)
    counts = spread(calls)
    check(set(counts) == {"r1", "r2"} and min(counts.values()) >= 2, f"spread {counts}")
    kinds = {(c.replica, c.flow) for c in calls}
    check(len(kinds) == 4, f"not every replica got both flows: {sorted(kinds)}")
    ok(f"new sessions spread over both replicas: {counts}, both flows on each")
    await owners_view(cluster, calls)
    ok("each session answers through HAProxy, on its own replica, 404 on the other")
    ok(f"/health sessions_active per replica: {await active_counts(cluster, calls)}")
    assert cluster.haproxy is not None
    ok(f"HAProxy log: {audit_log(cluster.haproxy, calls, set(cluster.replicas))}")
    for call in (next(c for c in calls if c.replica == r) for r in ("r1", "r2")):
        seconds = await spoken_turn(call, cluster.folder / "question.wav")
        ok(f"a spoken turn on {call.replica} answered ({seconds:.2f} s after the WAV began)")
    return calls


async def drain(cluster: Cluster, calls: list[Call]) -> list[Call]:
    print("2. SIGTERM to r1: it drains while r2 takes the new calls")
    r1, haproxy = cluster.replicas["r1"], cluster.haproxy
    assert haproxy is not None
    draining = [c for c in calls if c.replica == "r1"]
    made_before = (await health(r1.url))["sessions_total"]
    logged = len(haproxy.requests())
    signalled = time.monotonic()
    r1.terminate()
    marked_down = asyncio.ensure_future(
        asyncio.to_thread(haproxy.wait_status, "new_sessions", "r1", "DOWN", 10)
    )
    await until(lambda: r1.ready_status() == 503, "r1's /ready 503", 5)
    ok(f"r1 /ready answers 503 {time.monotonic() - signalled:.2f} s after SIGTERM")
    fresh = await open_calls(cluster.url, ["start", "offer"] * 2)
    check(spread(fresh) == {"r2": 4}, f"new sessions while r1 drains: {spread(fresh)}")
    retried = sum(r.retries != "0" for r in haproxy.requests()[logged:])
    ok(f"4 new sessions during the drain all on r2 ({retried} got r1's 503 first and were "
       f"retried on r2 by HAProxy)")  # fmt: skip
    ok(f"HAProxy marked r1 DOWN for new sessions {await marked_down:.1f} s after SIGTERM")
    state = await health(r1.url)
    check(state["draining"] and state["sessions_total"] == made_before, f"r1: {state}")
    ok(f"r1 made no session after SIGTERM ({made_before} in all), still serves "
       f"{state['sessions_active']} call(s)")  # fmt: skip
    for call in draining:
        await call.client.wait_for(lambda m: m.get("data", {}).get("type") == "server-shutdown")
    ok(f"r1's {len(draining)} clients were told server-shutdown")
    await owners_view(cluster, draining)
    talker = next(c for c in draining if c.flow == "offer")
    answer = await talker.client.renegotiate()
    check(answer["pc_id"] == talker.pc_id, f"renegotiation while draining: {answer['pc_id']}")
    seconds = await spoken_turn(talker, cluster.folder / "question.wav")
    ok(f"r1's calls still work by id: GET, renegotiation, a spoken turn ({seconds:.2f} s)")
    await hang_up(cluster, draining)
    ended = time.monotonic()
    code = await asyncio.to_thread(r1.wait_exit, GRACE_SECONDS + 10)
    exited = time.monotonic()
    check(exited - signalled < GRACE_SECONDS, f"r1 took {exited - signalled:.1f} s to exit")
    ok(f"r1 exited (code {code}) {exited - ended:.1f} s after its last call ended, "
       f"{exited - signalled:.1f} s after SIGTERM (grace {GRACE_SECONDS:.0f} s)")  # fmt: skip
    return [c for c in calls if c not in draining] + fresh


async def hang_up(cluster: Cluster, calls: list[Call]) -> None:
    """End calls as clients do: DELETE through HAProxy (routed by id), or close the peer."""
    for call in calls:
        if call.flow == "offer":
            response = await call.client.http.delete(f"/api/sessions/{call.pc_id}")
            check(response.status_code == 200, f"DELETE {call.pc_id}: {response.status_code}")
    await close_all(calls)
    ok(f"r1's calls hung up ({sum(c.flow == 'offer' for c in calls)} by DELETE through HAProxy)")


async def replacement(cluster: Cluster) -> list[Call]:
    print("3. a replacement r1 (same id, same address) takes new sessions again")
    r1, haproxy = cluster.replicas["r1"], cluster.haproxy
    assert haproxy is not None
    await asyncio.to_thread(r1.start)
    up = await asyncio.to_thread(haproxy.wait_status, "new_sessions", "r1", "UP", 10)
    fresh = await open_calls(cluster.url, ["start", "offer"] * 2)
    check("r1" in spread(fresh), f"new sessions after r1 came back: {spread(fresh)}")
    ok(f"r1 back UP in HAProxy {up:.1f} s after its /ready; new sessions: {spread(fresh)}")
    return fresh


async def kill(cluster: Cluster, calls: list[Call]) -> list[Call]:
    print("4. SIGKILL to r2: its clients fail cleanly and reconnect on r1")
    r2 = cluster.replicas["r2"]
    victims = [c for c in calls if c.replica == "r2"]
    r2.kill()
    # At once, before the health checks notice: the connection fails, HAProxy tries r1.
    first = await open_call(cluster.url, victims[0].flow)
    check(first.replica == "r1", f"a reconnect right after the kill landed on {first.replica}")
    ok("a new call right after the kill went to r1 (connection refused by r2, redispatched)")
    for call in victims:
        status, body = await session_status(cluster.url, call.pc_id)
        check(status == 503 and "<html>" in body, f"GET {call.pc_id} after the kill: {status}")
    ok(f"requests for r2's {len(victims)} sessions get HAProxy's 503 page")
    again = [first] + [await open_call(cluster.url, c.flow) for c in victims[1:]]
    check(spread(again) == {"r1": len(victims)}, f"reconnects: {spread(again)}")
    seconds = await spoken_turn(again[-1], cluster.folder / "question.wav")
    ok(f"all {len(victims)} clients reconnected on r1; a spoken turn there answered "
       f"({seconds:.2f} s)")  # fmt: skip
    states = Counter(c.client.pc.connectionState for c in victims)
    print(f"  (r2's old peer connections, seen by their clients: {dict(states)})")
    await close_all(victims)
    return [c for c in calls if c not in victims] + again


async def shared_history(cluster: Cluster, calls: list[Call]) -> None:
    print("5. one PostgreSQL: the history through HAProxy lists both replicas' calls")
    seen: list[str] = []
    params: dict[str, str | int] = {"limit": 5}
    async with httpx.AsyncClient(base_url=cluster.url, timeout=10) as http:
        while True:
            response = await http.get("/api/history", params=params)
            check(response.status_code == 200, f"GET /api/history: {response.status_code}")
            page = response.json()
            check(page["storage"] == "postgres", f"history from {page['storage']}")
            seen += [s["id"] for s in page["sessions"]]
            if page["next_before"] is None:
                break
            params = {"limit": 5, "before": page["next_before"],
                      "before_id": page["next_before_id"]}  # fmt: skip
    missing = {c.pc_id for c in calls} - set(seen)
    check(not missing, f"calls missing from the shared history: {sorted(missing)}")
    check(len(seen) == len(set(seen)), "a call listed twice across pages")
    by_replica = dict(sorted(Counter(owner(pc_id) for pc_id in seen).items()))
    ok(f"{len(seen)} calls in pages of 5 ({by_replica}), every one made, none twice")


async def scenario(cluster: Cluster, postgres: bool = False) -> None:
    calls: list[Call] = []
    everyone: list[Call] = []
    try:
        calls = await routing(cluster)
        everyone += calls
        calls = await drain(cluster, calls)
        everyone += calls
        fresh = await replacement(cluster)
        calls, everyone = calls + fresh, everyone + fresh
        calls = await kill(cluster, calls)
        everyone += calls
        if postgres:
            await shared_history(cluster, everyone)
        assert cluster.haproxy is not None
        print(f"{6 if postgres else 5}. the whole HAProxy log")
        ok(audit_log(cluster.haproxy, everyone, set(cluster.replicas)))
    finally:
        await close_all(everyone + calls)


def tails(cluster: Cluster, lines: int = 25) -> None:
    """The end of every log, to see why a check failed."""
    logs = {f"{rid} ({r.log_path})": r.log() for rid, r in cluster.replicas.items()}
    if cluster.haproxy is not None:
        logs[f"haproxy ({cluster.haproxy.log_path})"] = cluster.haproxy.log()
    for name, text in logs.items():
        print(f"\n--- {name}, last {lines} lines")
        print("\n".join(text.splitlines()[-lines:]))


def run(cluster: Cluster, postgres: bool = False) -> bool:
    """The scenario, bounded in time; whether every check held."""
    try:
        asyncio.run(asyncio.wait_for(scenario(cluster, postgres), TIMEOUT))
        return True
    except Exception as exc:
        if not isinstance(exc, Failure):
            traceback.print_exc()
        print(f"FAIL  {exc}", flush=True)
        tails(cluster)
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", action="store_true", help="keep the logs' folder")
    parser.add_argument("--config", type=Path, default=CONFIG, help="HAProxy's configuration")
    parser.add_argument("--postgres", action="store_true", help="one PostgreSQL for both")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="parley-scale-"))
    started = time.monotonic()
    make_speech(folder, "question", "What is two plus two?", before=0.3, after=0.5)
    failed = True
    try:
        with ExitStack() as stack, OpenAIStub() as stub:
            env = dict(ENV)
            if args.postgres:
                env |= shared_database(stack)
            stub.config.transcript, stub.config.default_text = "what is two plus two", "Four."
            cluster = Cluster(stub, folder, env, config=args.config)
            kill_on_signals(cluster)
            if args.postgres:
                stack.callback(remove_on_signals(stack))
            with cluster:
                where = " on one PostgreSQL" if args.postgres else ""
                print(f"r1, r2{where} and HAProxy on 127.0.0.1 "
                      f"({time.monotonic() - started:.1f} s)")  # fmt: skip
                failed = not run(cluster, args.postgres)
    finally:
        if failed or args.keep:
            print(f"\nlogs: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    if not failed:
        print(f"scale test passed in {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


def shared_database(stack: ExitStack) -> dict[str, str]:
    """A throwaway PostgreSQL, removed with ``stack``; the replicas' settings for it."""
    database = PostgresServer().start()
    stack.callback(database.remove)
    print(f"PostgreSQL on 127.0.0.1:{database.port} ({database.folder})")
    url = database.create_database("parley")
    return {"PARLEY_STORAGE": "postgres", "PARLEY_DATABASE_URL": url}


def remove_on_signals(stack: ExitStack) -> Callable[[], None]:
    """Also remove the database when a signal ends the run (``kill_on_signals`` exits at
    once, without unwinding): its handlers first close ``stack``. Returns the undo."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handler(signum: int, frame: FrameType | None) -> None:
        stack.close()
        chained = previous[signal.Signals(signum)]
        if callable(chained):
            chained(signum, frame)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    for sig in previous:
        signal.signal(sig, handler)
    return restore


if __name__ == "__main__":
    sys.exit(main())
