"""The checks of ``make kube-test`` (deploy/kube_play_test.py) on the played pods: the
kubelet's probes and stops, what podman applied, a call through coturn, and parley-0's
drain on SIGTERM. Each check prints what held (:func:`deploy.scale_calls.ok`) or raises
:class:`deploy.scale_calls.Failure`."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from aiortc import RTCConfiguration, RTCIceServer, RTCIceTransportPolicy

from deploy.kube_play_plan import TURN_DEPLOYMENT, Plan
from deploy.scale_calls import Call, check, ok, owner, spoken_turn, until
from server.session.shutdown import CLOSE_SECONDS
from testkit.kube_play import pod_template_spec, podman_secret
from testkit.kubelet_probes import Prober
from testkit.podman import Podman
from testkit.rtc_client import RTCTestClient

LOUD = 200.0  # a received frame louder than this (RMS) is the bot speaking
DRAINED = "parley-0"  # the pod that gets the call and the SIGTERM


class Run:
    """One run: podman, the plan, the pods' addresses and probers, and the times."""

    def __init__(self, podman: Podman, plan: Plan, host: str) -> None:
        self.podman, self.plan, self.host = podman, plan, host
        self.urls: dict[str, str] = {}
        self.probers: dict[str, Prober] = {}
        self.played_at = 0.0
        self.times: dict[str, float] = {}  # for the summary

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.plan.api_key}"}

    def pod(self, name: str) -> dict:
        (pod,) = [p for p in self.plan.parley_pods if p["metadata"]["name"] == name]
        return pod

    def env(self, name: str) -> dict[str, str]:
        """The literal env values of a Parley pod's container, as written."""
        entries = self.plan.container(self.pod(name)).get("env", [])
        return {e["name"]: str(e["value"]) for e in entries if "value" in e}

    async def terminate(self, pod: str, containers: list[str], grace: float) -> str:
        """Stop a pod as the kubelet does: SIGTERM to its containers, SIGKILL to those still
        running after ``grace``, and only then its sandbox. (``podman pod stop`` would stop
        the infra container at once, and with it the pod's network, under the drain.)
        Returns podman's complaints, if any (it says so when it had to SIGKILL)."""
        stops = [
            self.podman.run_async("stop", "--time", f"{grace:g}", f"{pod}-{c}", within=grace + 60)
            for c in containers
        ]
        errors = []
        for code, _, err in await asyncio.gather(*stops):
            check(code == 0, f"podman stop ({pod}): exit {code}: {err}")
            errors.append(err)
        code, _, err = await self.podman.run_async("pod", "stop", pod, within=60)
        check(code == 0, f"podman pod stop {pod}: exit {code}: {err}")
        return "".join(errors)

    def cleanup(self) -> None:
        plan = self.plan
        self.podman.remove(plan.pod_names, plan.volume_names, list(plan.secrets))

    def logs(self) -> None:
        for name in self.plan.pod_names:
            container = f"{name}-{'turn' if name.startswith(TURN_DEPLOYMENT) else 'parley'}"
            proc = self.podman.run("logs", "--tail", "200", container, check=False)
            # coturn repeats one line a lot ("socket: Protocol not supported"): once each.
            lines = list(dict.fromkeys((proc.stdout + proc.stderr).splitlines()))[-40:]
            print(f"--- {container} (its last 40 distinct lines)", *lines, sep="\n", flush=True)


async def play(run: Run) -> None:
    """Create the secrets, play the workloads, start each pod's prober."""
    podman, plan = run.podman, run.plan
    for name, data in plan.secrets.items():
        podman.run("secret", "create", name, "-", stdin=podman_secret({"stringData": data}))
    configmaps = ",".join(str(p) for p in plan.configmap_files)
    started = time.monotonic()
    code, _, err = await podman.run_async(
        "kube", "play", "--configmap", configmaps, str(plan.workloads_file), within=180
    )
    check(code == 0, f"podman kube play: exit {code}: {err}")
    run.played_at = time.monotonic()
    run.times["play"] = run.played_at - started
    ok(f"podman kube play: pods {', '.join(plan.pod_names)} in {run.played_at - started:.1f} s")
    for pod in plan.parley_pods:
        name = pod["metadata"]["name"]
        address = podman.pod_ip(name)
        run.urls[name] = f"http://{address}:{plan.container(pod)['ports'][0]['containerPort']}"
        run.probers[name] = Prober(plan.container(pod), address)
    # hostNetwork: the pod's address is the node's.
    run.probers[f"{TURN_DEPLOYMENT}-pod-0"] = Prober(plan.turn_container(), run.host)
    for prober in run.probers.values():
        prober.start()


def settled(prober: Prober) -> Callable[[], bool]:
    """Whether the kubelet would have made up its mind: Ready, or a restart."""
    return lambda: prober.ready or bool(prober.restarts)


async def wait_ready(run: Run) -> None:
    for name, prober in run.probers.items():
        budget = prober.probes["startup"].spec if "startup" in prober.probes else {}
        within = budget.get("periodSeconds", 10) * budget.get("failureThreshold", 3) + 30
        await until(settled(prober), f"{name} Ready", within)
        check(not prober.restarts, f"{name}: the kubelet would restart it: {prober.restarts}")
        started, ready = prober.when("Started"), prober.when("Ready")
        assert started is not None and ready is not None
        if name in run.urls:  # a Parley pod
            run.times["ready"] = max(run.times.get("ready", 0.0), ready - run.played_at)
        how = "startup probe passed" if "startup" in prober.probes else "started (no startup probe)"
        ok(f"{name}: {how} {started - run.played_at:.1f} s after kube play, "
           f"Ready (readiness probe) at {ready - run.played_at:.1f} s")  # fmt: skip


def check_container(run: Run, name: str) -> None:
    """What podman applied of the pod's securityContext and resources, seen inside."""
    container = f"{name}-parley"
    proc = run.podman.run(
        "exec", container, "sh", "-c",
        "id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/1/status; touch /x 2>&1;"
        " touch /tmp/x && echo /tmp writable",
    )  # fmt: skip
    uid, caps, no_new_privileges, seccomp, touch, tmp = proc.stdout.splitlines()[:6]
    spec = pod_template_spec(run.pod(name))["securityContext"]
    check(uid == str(spec["runAsUser"]), f"{container} runs as {uid}")
    check(caps.split()[-1] == "0000000000000000", f"{container}: {caps}")
    check(no_new_privileges.split()[-1] == "1", f"{container}: {no_new_privileges}")
    check(seccomp.split()[-1] == "2", f"{container}: {seccomp} (2: a filter)")
    check("Read-only file system" in touch, f"{container}: the root is writable: {touch}")
    check(tmp == "/tmp writable", f"{container}: the emptyDir /tmp: {proc.stdout}")
    limits = run.plan.container(run.pod(name))["resources"]["limits"]
    host = run.podman.inspect(container)["HostConfig"]
    memory = int(limits["memory"].removesuffix("Mi")) * 2**20
    check(host["Memory"] == memory, f"{container}: memory limit {host['Memory']}, not {memory}")
    check(host["NanoCpus"] == int(float(limits["cpu"]) * 1e9), f"{container}: {host['NanoCpus']}")
    ok(f"{container}: uid {uid}, no capabilities, no-new-privileges, seccomp, read-only root "
       f"(/tmp writable), limits {limits['memory']} and {limits['cpu']} CPUs")  # fmt: skip


async def open_call(run: Run, name: str, wav: Path) -> Call:
    """The official client's flow through coturn; the greeting, then a spoken turn."""
    url = run.urls[name]
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        refused = await http.post("/start", json={})
        check(refused.status_code == 401, f"/start without a key: {refused.status_code}")
        started = (await http.post("/start", json={}, headers=run.auth)).raise_for_status().json()
    servers = [RTCIceServer(s["urls"], s.get("username"), s.get("credential"))
               for s in started["iceConfig"]["iceServers"]]  # fmt: skip
    check(bool(servers), "/start's iceConfig names no TURN server")
    relay_only = RTCConfiguration(
        iceServers=servers, iceTransportPolicy=RTCIceTransportPolicy.RELAY
    )
    client = RTCTestClient(url, configuration=relay_only)
    client.http.headers.update(run.auth)
    try:
        handshake = await client.connect(session_id=started["sessionId"])
        run.times["handshake"] = handshake
        ready = time.monotonic()
        call = Call(client, "start", started["sessionId"])
        kinds = {line.split()[7] for line in client.pc.localDescription.sdp.splitlines()
                 if line.startswith("a=candidate:")}  # fmt: skip
        check(kinds == {"relay"}, f"the client's candidates: {kinds}, not relay only")
        check(call.replica == name == owner(call.session_id or ""), f"ids {call.ids()}")
        ok(f"{name}: /start (401 without the key), offer, trickle and bot-ready through "
           f"coturn in {handshake:.2f} s; pc_id {call.pc_id}")  # fmt: skip
        heard = await until(
            lambda: next((t for t, rms in client.audio.frames if rms > LOUD), None),
            "the greeting", 20,
        )  # fmt: skip
        await until(lambda: client.silent_since(heard, hold=50), "the greeting's end", 30)
        ok(f"{name}: greeting heard {heard - ready:.2f} s after bot-ready")
        answered = await spoken_turn(call, wav, within=30)
        ok(f"{name}: spoken turn answered aloud ({answered:.2f} s from the end of the speech)")
        report_memory(run, name)
        return call
    except BaseException:
        await client.close()
        raise


def report_memory(run: Run, name: str) -> None:
    """The container's peak memory so far (its cgroup's), against its limit."""
    peak = run.podman.run(
        "exec", f"{name}-parley", "sh", "-c",
        "cat /sys/fs/cgroup/memory/memory.max_usage_in_bytes 2>/dev/null"
        " || cat /sys/fs/cgroup/memory.peak",
    ).stdout  # fmt: skip
    limit = run.plan.container(run.pod(name))["resources"]["limits"]["memory"]
    ok(f"{name}: peak memory {int(peak) / 2**20:.0f} MiB (limit {limit})")


async def text_turn(call: Call) -> float:
    """A text turn answered aloud; returns seconds to its first loud frame."""
    client = call.client
    before = client.types().count("bot-stopped-speaking")
    asked = time.monotonic()
    client.send_rtvi("send-text", {"content": "Are you still there?",
                                   "options": {"audio_response": True}})  # fmt: skip
    await until(lambda: client.types().count("bot-stopped-speaking") > before, "an answer", 20)
    loud = [t for t, rms in client.audio.frames if t > asked and rms > LOUD]
    check(bool(loud), "the answer had no audio")
    return loud[0] - asked


async def told_and_refused(run: Run, call: Call, sent: float, grace: float) -> float:
    """Right after SIGTERM: the client is told, /ready fails, /health does not, and a new
    session is refused. Returns when the client was told (the drain had begun)."""
    told = await call.client.wait_for(
        lambda m: m.get("type") == "server-message"
        and m.get("data", {}).get("type") == "server-shutdown",
        10,
    )  # fmt: skip
    told_at = time.monotonic()
    at = told_at - sent
    check(told["data"]["grace_seconds"] == grace, f"told {told['data']}, not a {grace} s grace")
    ok(f"{DRAINED}: the call told server-shutdown (grace {grace:g} s) {at:.2f} s after SIGTERM")
    async with httpx.AsyncClient(base_url=run.urls[DRAINED], timeout=3) as http:
        ready = await http.get("/ready")
        health = await http.get("/health")
        start = await http.post("/start", json={}, headers=run.auth)
    check(ready.status_code == 503, f"/ready while draining: {ready.status_code}")
    check(health.status_code == 200 and health.json()["status"] == "draining", health.text)
    check(start.status_code == 503 and "retry-after" in start.headers, f"/start: {start}")
    ok(f"{DRAINED}: /ready 503, /health 200 (draining), /start 503 with Retry-After")
    return told_at


async def drain(run: Run, call: Call) -> None:
    """SIGTERM to parley-0 as the kubelet sends it, and what must follow (check 3)."""
    spec = pod_template_spec(run.pod(DRAINED))
    termination = float(spec["terminationGracePeriodSeconds"])
    grace = float(run.env(DRAINED)["PARLEY_SHUTDOWN_GRACE_SECONDS"])
    prober, other = run.probers[DRAINED], run.probers["parley-1"]
    sent = time.monotonic()
    stop = asyncio.create_task(run.terminate(DRAINED, ["parley"], termination))
    told_at = await told_and_refused(run, call, sent, grace)
    readiness = prober.probes["readiness"].spec
    notice = (
        readiness["periodSeconds"] * readiness["failureThreshold"] + readiness["timeoutSeconds"]
    )
    not_ready = await until(lambda: prober.when("NotReady", sent), "NotReady", notice + 2)
    ok(f"{DRAINED}: NotReady by its readiness probe {not_ready - sent:.1f} s after SIGTERM")
    answered = await text_turn(call)
    ok(f"{DRAINED}: the call goes on while draining: a text turn answered in {answered:.2f} s")
    ended = await call.client.wait_for(
        lambda m: m.get("type") == "error" and m.get("data", {}).get("fatal") is True,
        grace + CLOSE_SECONDS + 10,
    )  # fmt: skip
    end = time.monotonic() - sent
    run.times |= {"ended": end, "grace": grace, "termination": termination}
    check(
        grace - 1 <= end <= grace + CLOSE_SECONDS + 2, f"the call ended {end:.1f} s after SIGTERM"
    )
    await until(lambda: any(m.get("message") == {"type": "peerLeft"} for m in call.client.messages),
                "peerLeft", 2)  # fmt: skip
    ok(f"{DRAINED}: the call ended by the server {end:.1f} s after SIGTERM: "
       f"{ended['data']['error']!r}, then peerLeft")  # fmt: skip
    during = [o for o in prober.probes["liveness"].outcomes if sent <= o.at <= sent + end]
    failed = [o.detail for o in during if not o.passed]
    check(not failed and not prober.restarts, f"liveness failed while draining: {failed}")
    readies = [o for o in prober.probes["readiness"].outcomes if told_at <= o.at <= sent + end]
    check(not any(o.passed for o in readies), "a readiness probe passed while draining")
    ok(f"{DRAINED}: while it drained, all {len(during)} liveness probes passed and all "
       f"{len(readies)} readiness probes failed")  # fmt: skip
    await prober.stop()
    err = await stop
    exited = time.monotonic() - sent
    run.times["exited"] = exited
    state = run.podman.inspect(f"{DRAINED}-parley")["State"]
    check("SIGKILL" not in err, f"podman had to kill {DRAINED}: {err}")
    check(state["ExitCode"] == 0 and not state["OOMKilled"], f"{DRAINED} exited: {state}")
    check(exited < termination, f"exited {exited:.1f} s after SIGTERM, past {termination:g}")
    ok(f"{DRAINED}: exited with status 0 {exited:.1f} s after SIGTERM "
       f"(terminationGracePeriodSeconds {termination:g})")  # fmt: skip
    check(other.ready and not other.when("NotReady"), "parley-1 went NotReady meanwhile")
    ok("parley-1 stayed Ready throughout")
    check_record(run, call)


def check_record(run: Run, call: Call) -> None:
    """The call's record is on parley-0's claim, closed by the shutdown."""
    claim = next(v["persistentVolumeClaim"]["claimName"]
                 for v in pod_template_spec(run.pod(DRAINED))["volumes"]
                 if "persistentVolumeClaim" in v)  # fmt: skip
    database = run.podman.volume_path(claim) / "transcripts.db"
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        row = db.execute(
            "SELECT start_id, ended_us, close_reason FROM sessions WHERE id = ?", (call.pc_id,)
        ).fetchone()
    check(row is not None, f"no record of {call.pc_id} in {claim}")
    start_id, ended_us, reason = row
    check(start_id == call.session_id and ended_us and reason == "server shutdown", str(row))
    ok(f"{claim}: the call's record is closed ({reason!r})")


async def stop_the_rest(run: Run) -> None:
    """parley-1 (no call: its drain ends at once) and coturn, as the kubelet stops them."""
    spec = pod_template_spec(run.pod("parley-1"))
    turn_grace = pod_template_spec(run.plan.turn).get("terminationGracePeriodSeconds", 30)
    for name, grace in (("parley-1", spec["terminationGracePeriodSeconds"]),
                        (f"{TURN_DEPLOYMENT}-pod-0", turn_grace)):  # fmt: skip
        await run.probers[name].stop()
        sent = time.monotonic()
        container = "turn" if name.startswith(TURN_DEPLOYMENT) else "parley"
        err = await run.terminate(name, [container], float(grace))
        check("SIGKILL" not in err, f"podman had to kill {name}: {err}")
        ok(f"{name}: stopped {time.monotonic() - sent:.1f} s after SIGTERM (grace {grace} s)")
