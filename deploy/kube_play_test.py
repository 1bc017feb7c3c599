"""``make kube-test``: the Parley workload of deploy/kubernetes/ run for real by Debian's
``podman kube play`` (podman 4.3, runc), from the files as committed, with the images
``make container-test`` built (localhost/parley:test, localhost/parley-turn:test).

podman plays Pods, Deployments, claims and ConfigMaps, but no StatefulSet and no Secret,
and runs no probes: deploy/kube_play_plan.py makes what Kubernetes would make of the files
(the StatefulSet's pods parley-0 and parley-1 with their claims, the kubelet's ``$(VAR)``
expansion, the Secrets as podman secrets), coturn is the Deployment parley-turn on the
host network, and the probes run here as the kubelet runs them
(testkit/kubelet_probes.py). The models are the OpenAI-compatible stub, reached at this
host's address. Checks:

1. every pod starts and passes its startup, then its readiness probe; the Parley container
   runs as 10001 with a read-only root, no capabilities, and the manifest's limits;
2. a call as the official client makes it, its media relayed by coturn (relay candidates
   only): ``POST /start`` (401 without the API key), offer, trickle, ``bot-ready``, the
   greeting heard, a spoken turn answered; its ids start with the pod's name;
3. SIGTERM to parley-0 as the kubelet sends it (``podman pod stop --time
   terminationGracePeriodSeconds``: TERM, then KILL when the time is up): the call is
   told (``server-shutdown``), ``/ready`` fails and the pod goes NotReady while liveness
   keeps passing, ``/start`` gets 503; the call goes on (a text turn answered aloud) and
   is ended when PARLEY_SHUTDOWN_GRACE_SECONDS are over; the container exits 0 within the
   termination grace period, and the call's record on its volume is closed; parley-1
   stays Ready all along;
4. every pod, volume and podman secret made is removed, also on failure or a signal.

Prints each check and its time; exits 1 on the first that fails (with the pods' logs).

    .venv/bin/python -m deploy.kube_play_test [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deploy.kube_play_checks import (
    DRAINED,
    Run,
    check_container,
    drain,
    open_call,
    play,
    stop_the_rest,
    wait_ready,
)  # fmt: skip
from deploy.kube_play_plan import make_plan, not_played
from deploy.scale_calls import Failure, check
from testkit.openai_stub import OpenAIStub
from testkit.podman import IMAGE, STATE, TURN_IMAGE, Podman, PodmanError
from testkit.speech import make_speech

TIMEOUT = 480.0  # the whole scenario; the drain alone is PARLEY_SHUTDOWN_GRACE_SECONDS


def host_address() -> str:
    """This host's address on its default route: coturn's, reached by clients and pods."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("192.0.2.1", 9))
        return str(sock.getsockname()[0])


def check_port_free(port: int) -> None:
    """coturn binds its port on the host network: say so clearly if it is taken."""
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError as exc:
                raise Failure(f"port {port} (TURN_PORT: coturn's, on the host) is taken") from exc


async def relay(listen: str, target: int) -> asyncio.Server:
    """TCP from ``listen`` (this host's address, a free port) to 127.0.0.1:``target``: the
    stub binds loopback, which the pods cannot reach."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        except (OSError, asyncio.CancelledError):
            # A connection cut, or the run's end: not the relay's to report (and asyncio's
            # stream server logs a cancelled handler as an error).
            writer.close()

    return await asyncio.start_server(handle, listen, 0)


@contextmanager
def locked(state: Path) -> Iterator[None]:
    """One kube-test at a time per podman storage: the pods have the manifests' names."""
    fd = os.open(state / "kube-test.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                check(time.monotonic() < deadline, "another kube-test held the lock for 10 min")
                time.sleep(1)
        yield
    finally:
        os.close(fd)


async def scenario(run: Run, wav: Path) -> None:
    await play(run)
    await wait_ready(run)
    for pod in run.plan.parley_pods:
        check_container(run, pod["metadata"]["name"])
    call = await open_call(run, DRAINED, wav)
    try:
        await drain(run, call)
    finally:
        await call.client.close()
    await stop_the_rest(run)
    times = run.times
    print(f"kube play {times['play']:.1f} s · Parley Ready {times['ready']:.1f} s after it · "
          f"call up in {times['handshake']:.2f} s · drain: call ended "
          f"{times['ended']:.1f} s, container exited {times['exited']:.1f} s after SIGTERM "
          f"(PARLEY_SHUTDOWN_GRACE_SECONDS {times['grace']:g}, "
          f"terminationGracePeriodSeconds {times['termination']:g})", flush=True)  # fmt: skip


async def with_stub(podman: Podman, folder: Path, host: str, wav: Path) -> None:
    """The stub (and its relay) for the models, the plan, and the scenario in time."""
    with OpenAIStub() as stub:
        stub.config.transcript, stub.config.default_text = "what is two plus two", "Four."
        port = int(stub.url.rsplit(":", 1)[1])
        server = await relay(host, port)
        models = f"http://{host}:{server.sockets[0].getsockname()[1]}/v1"
        plan = make_plan(folder, host, models, stub.api_key)
        for why, objects in not_played(plan).items():
            print(f"not played: {', '.join(objects)}: {why}", flush=True)
        run = Run(podman, plan, host)
        stop_on_signals(run)
        run.cleanup()  # what a run killed before its end left behind
        check_port_free(int(plan.turn_container()["ports"][0]["containerPort"]))
        try:
            async with asyncio.timeout(TIMEOUT):
                await scenario(run, wav)
        except BaseException:
            run.logs()
            raise
        finally:
            for prober in run.probers.values():
                await prober.stop()
            run.cleanup()
            server.close()


def stop_on_signals(run: Run) -> None:
    """On SIGTERM or SIGINT (a CI runner giving up, Ctrl-C): remove the pods, volumes and
    secrets, and exit at once."""

    def stop(signum: int, _frame: object) -> None:
        run.cleanup()
        print(f"interrupted by signal {signum}: pods, volumes and secrets removed", flush=True)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the played files' folder")
    args = parser.parse_args()
    started = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="parley-kube-"))
    failed = True
    try:
        podman = Podman(STATE)
        missing = [i for i in (IMAGE, TURN_IMAGE) if not podman.image_exists(i)]
        check(not missing, f"{missing} not built: run `make container-test` first")
        print(f"{podman.version()}, runtime runc; images {IMAGE}, {TURN_IMAGE}", flush=True)
        wav = make_speech(folder, "question", "What is two plus two?", before=0.3, after=0.5)
        with locked(STATE):
            asyncio.run(with_stub(podman, folder, host_address(), wav))
        failed = False
    except (Failure, PodmanError) as exc:
        print(f"kube-test: FAILED: {exc}", file=sys.stderr)
    except Exception as exc:  # a timeout, an HTTP error: where it happened matters
        traceback.print_exc()
        print(f"kube-test: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        if failed or args.keep:
            print(f"played files: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    if not failed:
        print(f"kube-test passed in {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
