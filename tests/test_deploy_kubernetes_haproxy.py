"""The HAProxy of deploy/kubernetes/ (the ConfigMap parley-haproxy): it passes ``haproxy -c``,
it routes with the same rules as deploy/haproxy/haproxy.cfg, it has a server for every pod
the autoscaler can make, and it really routes by pod name: two Parley replicas named
parley-0 and parley-1 behind it, found by their DNS names as in the cluster (a DNS server
of the test's stands in for the cluster's). HAProxy comes from Debian
(``apt-get install haproxy``)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from testkit.dns_server import DNSServer
from testkit.haproxy import CONFIG, HAProxyProcess, check_config
from testkit.kubernetes_manifests import base, container, env_entries, find, load_all, resolve_env
from testkit.replicas import Replica
from testkit.server_process import free_port

MANIFESTS = load_all()
HAPROXY_CFG = find(MANIFESTS, "ConfigMap", "parley-haproxy")["data"]["haproxy.cfg"]
# Lines that differ by design between the two configurations: where they listen, and
# how they find the replicas (addresses from the environment there, DNS here).
LOCAL_LINES = re.compile(r"^(bind |server |default-server |\.if|\.else|\.endif)")


def sections(text: str) -> dict[str, list[str]]:
    """A config's sections ("frontend parley", "backend new_sessions", ...: the lines that
    are not indented) and their directives, without comments and blank lines."""
    found: dict[str, list[str]] = {}
    current: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if raw[0].isspace() or line.startswith("."):  # .if/.else/.endif: in the section
            current.append(line)
        else:
            current = found.setdefault(line, [])
    return found


def shared(lines: list[str]) -> list[str]:
    return [line for line in lines if not LOCAL_LINES.match(line)]


def max_replicas() -> int:
    return find(base(MANIFESTS), "HorizontalPodAutoscaler", "parley")["spec"]["maxReplicas"]


def haproxy_env() -> dict[str, str]:
    deployment = find(MANIFESTS, "Deployment", "parley-haproxy")
    return resolve_env(MANIFESTS, container(deployment, "haproxy"), "parley-haproxy-0")


def test_the_config_passes_haproxy_check(tmp_path: Path) -> None:
    config = tmp_path / "haproxy.cfg"
    config.write_text(HAPROXY_CFG)
    proc = check_config(haproxy_env(), config)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Configuration file is valid" in proc.stdout + proc.stderr


def test_it_routes_with_the_rules_of_deploy_haproxy() -> None:
    ours, theirs = sections(HAPROXY_CFG), sections(CONFIG.read_text())
    for name in ("global", "defaults", "frontend parley", "backend new_sessions"):
        assert shared(ours[name]) == shared(theirs[name]), f"{name} differs"
    # The same check timing; DNS resolution added.
    (default,) = [s for s in theirs["defaults"] if s.startswith("default-server ")]
    (in_cluster,) = [s for s in ours["defaults"] if s.startswith("default-server ")]
    assert in_cluster.startswith(f"{default} resolvers cluster ")
    for name, lines in theirs.items():
        if name.startswith("backend replica_"):  # each replica's backend, by its id
            assert shared(ours["backend replica_parley-0"]) == shared(lines)


def test_there_is_a_server_for_every_pod_the_autoscaler_makes() -> None:
    sts = find(MANIFESTS, "StatefulSet", "parley")
    port = container(sts, "parley")["ports"][0]["containerPort"]
    ours = sections(HAPROXY_CFG)
    pods = [f"parley-{n}" for n in range(max_replicas())]
    servers = [f'server {pod} "{pod}.${{REPLICAS_DOMAIN}}:{port}" check' for pod in pods]
    assert [s for s in ours["backend new_sessions"] if s.startswith("server ")] == servers
    owners = sorted(name for name in ours if name.startswith("backend replica_"))
    assert owners == sorted(f"backend replica_{pod}" for pod in pods)
    for pod, server in zip(pods, servers, strict=True):
        # Not health-checked: only new sessions need a replica to be ready.
        owner = server.removesuffix(" check")
        assert [s for s in ours[f"backend replica_{pod}"] if s.startswith("server ")] == [owner]
    domain = env_entries(container(find(MANIFESTS, "Deployment", "parley-haproxy"), "haproxy"))
    service = sts["spec"]["serviceName"]
    assert domain["REPLICAS_DOMAIN"]["value"] == f"{service}.$(POD_NAMESPACE).svc.cluster.local"


def start(url: str) -> str:
    response = httpx.post(f"{url}/start", json={}, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["sessionId"]


def patch_candidates(url: str, path: str, pc_id: str) -> int:
    body = {"pc_id": pc_id, "candidates": []}
    return httpx.patch(f"{url}{path}", json=body, timeout=10).status_code


def until(condition: Callable[[], bool], what: str, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        time.sleep(0.1)


class Pods:
    """Parley replicas named like the StatefulSet's pods, each on its own loopback address
    (127.0.0.N) and the same port, as pods have their own IP; the DNS server maps their
    names, parley-N.<REPLICAS_DOMAIN>, to those addresses, as the headless Service does."""

    def __init__(self, folder: Path, dns: DNSServer, domain: str) -> None:
        self.folder, self.dns, self.domain = folder, dns, domain
        self.port = free_port()
        self.replicas: dict[str, Replica] = {}
        self.addresses = iter(f"127.0.0.{n}" for n in range(2, 250))

    def start(self, name: str) -> Replica:
        """(Re)start pod ``name`` at a new address, as Kubernetes recreates a pod."""
        address = next(self.addresses)
        replica = self.replicas.get(name) or Replica(name, self.folder / name, {})
        replica.env |= {"PARLEY_HOST": address, "PARLEY_PORT": str(self.port)}
        replica.port, replica.url = self.port, f"http://{address}:{self.port}"
        self.replicas[name] = replica.start()
        self.dns.set(f"{name}.{self.domain}", address)
        return replica

    def delete(self, name: str) -> None:
        self.replicas[name].kill()
        self.dns.remove(f"{name}.{self.domain}")

    def stop(self) -> None:
        for replica in self.replicas.values():
            replica.stop()


def in_cluster_config(dns: DNSServer, port: int) -> str:
    """The ConfigMap's config, but resolving with ``dns`` and reaching the pods on ``port``."""
    config = HAPROXY_CFG.replace("parse-resolv-conf", f"nameserver test 127.0.0.1:{dns.port}")
    return config.replace("${REPLICAS_DOMAIN}:7860", f"${{REPLICAS_DOMAIN}}:{port}")


@pytest.mark.e2e
def test_it_routes_every_session_to_the_pod_named_in_its_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    domain = haproxy_env()["REPLICAS_DOMAIN"]
    monkeypatch.setenv("REPLICAS_DOMAIN", domain)
    with ExitStack() as stack:
        dns = DNSServer()
        stack.callback(dns.close)
        pods = Pods(tmp_path, dns, domain)
        stack.callback(pods.stop)
        for name in ("parley-0", "parley-1"):
            pods.start(name)
        config = tmp_path / "haproxy.cfg"
        config.write_text(in_cluster_config(dns, pods.port))
        lb = HAProxyProcess({}, tmp_path / "haproxy.log", config=config)
        stack.callback(lb.stop)
        for name in pods.replicas:
            lb.wait_status("new_sessions", name, "UP", within=20)
        assert lb.status("new_sessions", "parley-2").startswith("MAINT"), "no such pod"
        metrics = httpx.get(f"{pods.replicas['parley-0'].url}/metrics", timeout=5).text
        assert re.search(r"^parley_sessions_active ", metrics, re.M), "the HPA's metric"

        ids = [start(lb.url) for _ in range(4)]
        assert {i.split(".")[0] for i in ids} == set(pods.replicas), f"new sessions: {ids}"
        for sid in ids:  # the /start flow: the id in the path
            patch_candidates(lb.url, f"/sessions/{sid}/api/offer", sid)
        for name in pods.replicas:  # the plain flow: the pc_id in the body
            patch_candidates(lb.url, "/api/offer", f"{name}.x")
        routed = [r for r in lb.requests() if r.method == "PATCH"]
        assert len(routed) == len(ids) + len(pods.replicas)
        for request in routed:
            assert (request.backend, request.server) == (
                f"replica_{request.owner}", request.owner), request  # fmt: skip

        # A pod that is gone: new sessions go to the other; its own ids fail at once.
        pods.delete("parley-0")
        until(lambda: lb.status("new_sessions", "parley-0") != "UP", "parley-0 out")
        assert {start(lb.url).split(".")[0] for _ in range(3)} == {"parley-1"}
        gone = next(i for i in ids if i.startswith("parley-0."))
        assert patch_candidates(lb.url, f"/sessions/{gone}/api/offer", gone) == 503

        # Its replacement, same name, new address: found by DNS, routed to by name.
        pods.start("parley-0")
        until(lambda: lb.status("new_sessions", "parley-0") == "UP", "parley-0 back")
        until(lambda: patch_candidates(lb.url, "/api/offer", "parley-0.new") == 404,
              "the replacement answers for its id")  # fmt: skip
        assert lb.requests()[-1].server == "parley-0"
