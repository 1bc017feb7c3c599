"""deploy/kubernetes/: every object against the Kubernetes schema, and the facts that tie
the manifests to Parley and to each other (drain time, probes, settings, replica ids,
selectors, references). The HAProxy inside is checked in test_deploy_kubernetes_haproxy.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from pydantic import AliasChoices

from server.__main__ import HTTP_GRACE_SECONDS
from server.session.shutdown import CLOSE_SECONDS, HOOK_SECONDS
from server.settings import Settings
from testkit.kubernetes_manifests import (
    KUSTOMIZATION,
    MANIFESTS,
    SECRETS_EXAMPLE,
    Manifest,
    base,
    container,
    env_entries,
    find,
    load_all,
    manifest_files,
    pod_spec,
    resolve_env,
)

# The oldest Kubernetes the manifests are for (the preStop sleep action is on by default
# from 1.30) and the newest whose schemas kubernetes-validate bundles.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
MANIFESTS_ALL = load_all()
WORKLOADS = ("StatefulSet", "Deployment")


def statefulset() -> dict:
    return find(MANIFESTS_ALL, "StatefulSet", "parley")


def parley() -> dict:
    return container(statefulset(), "parley")


def setting_names() -> set[str]:
    """Every environment variable Parley's settings read."""
    names = set()
    for field, info in Settings.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names |= {choice for choice in alias.choices if isinstance(choice, str)}
        else:
            names.add(f"PARLEY_{field.upper()}")
    return names


def matches(selector: dict, labels: dict) -> bool:
    return selector.items() <= labels.items()


def template_labels(workload: dict) -> dict:
    return workload["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("manifest", MANIFESTS_ALL, ids=lambda m: f"{m.path.name}:{m.name}")
def test_manifest_matches_the_kubernetes_schema(manifest: Manifest, version: str) -> None:
    # strict: a misspelt or misplaced field is an error, not silently ignored.
    try:
        kubernetes_validate.validate(manifest.obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        pytest.fail(f"{manifest.path.name} {manifest.kind}/{manifest.name}: {path}: {exc.message}")
    except kubernetes_validate.SchemaNotFoundError as exc:
        pytest.fail(exc.message)


def test_the_kustomization_applies_every_base_manifest() -> None:
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text())
    listed = set(kustomization["resources"])
    files = {p.name for p in manifest_files() if p.parent == MANIFESTS and p != SECRETS_EXAMPLE}
    assert listed == files, "kustomization.yaml and the files in deploy/kubernetes/ differ"
    images = {c["image"].split(":")[0] for m in MANIFESTS_ALL if m.kind in WORKLOADS
              for c in pod_spec(m.obj)["containers"]}  # fmt: skip
    assert {i["name"] for i in kustomization["images"]} == images


def test_the_drain_fits_in_the_termination_grace_period() -> None:
    spec = pod_spec(statefulset())
    grace = float(env_entries(parley())["PARLEY_SHUTDOWN_GRACE_SECONDS"]["value"])
    pre_stop = parley().get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    # After the grace: the sessions left are closed, HTTP requests finish, hooks and the
    # transcript flush run (server/session/shutdown.py, server/__main__.py).
    worst = pre_stop + grace + CLOSE_SECONDS + HTTP_GRACE_SECONDS + HOOK_SECONDS
    assert spec["terminationGracePeriodSeconds"] > worst, (
        f"Kubernetes kills the pod after {spec['terminationGracePeriodSeconds']} s; "
        f"the drain may take {worst} s"
    )
    assert grace >= 60, "calls get at least a minute to finish"


def test_haproxy_finishes_an_offer_in_flight_before_it_is_killed() -> None:
    deployment = find(MANIFESTS_ALL, "Deployment", "parley-haproxy")
    haproxy = container(deployment, "haproxy")
    pre_stop = haproxy["lifecycle"]["preStop"]["sleep"]["seconds"]
    offer = Settings.model_fields["offer_timeout"].default
    assert pod_spec(deployment)["terminationGracePeriodSeconds"] >= pre_stop + offer


def test_probes_ask_ready_and_health_on_the_server_port() -> None:
    c = parley()
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["http"] == int(env_entries(c)["PARLEY_PORT"]["value"])
    expected = {"readinessProbe": "/ready", "livenessProbe": "/health", "startupProbe": "/health"}
    for probe, path in expected.items():
        get = c[probe]["httpGet"]
        assert (get["path"], ports.get(get["port"], get["port"])) == (path, ports["http"]), probe
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120, "a slow cold start"


def test_every_setting_named_exists_and_the_values_parse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    known = setting_names()
    for manifest in MANIFESTS_ALL:
        text = yaml.safe_dump(manifest.obj)
        for name in set(re.findall(r"\b(PARLEY_[A-Z0-9_]+|OPENAI_[A-Z0-9_]+)\b", text)):
            assert name in known, f"{manifest.path.name}: {name} is not a Parley setting"
    for name in list(os.environ):
        if name in known or name.startswith("PARLEY_"):
            monkeypatch.delenv(name)
    env = resolve_env(MANIFESTS_ALL, parley(), "parley-9")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings()  # raises on a value Parley would refuse at start
    assert settings.replica_id == "parley-9"
    assert settings.provider("llm") == "openai"
    turn = find(MANIFESTS_ALL, "ConfigMap", "parley-turn")["data"]
    (ice,) = settings.ice_servers
    assert f"turn:{turn['TURN_HOST']}:{turn['TURN_PORT']}?transport=udp" in ice.urls
    assert (ice.username, ice.credential) == (turn["TURN_USERNAME"], env["TURN_PASSWORD"])


def test_the_replica_id_is_the_pod_name() -> None:
    entry = env_entries(parley())["PARLEY_REPLICA_ID"]
    assert entry["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # Pod names are <statefulset>-<ordinal>; the largest the HPA makes must be a valid id.
    hpa = find(base(MANIFESTS_ALL), "HorizontalPodAutoscaler", "parley")
    last = f"{statefulset()['metadata']['name']}-{hpa['spec']['maxReplicas'] - 1}"
    assert Settings(replica_id=last).replica_id == last


def test_service_links_cannot_overwrite_settings() -> None:
    # Kubernetes sets <SERVICE>_PORT, <SERVICE>_SERVICE_HOST, ... for each Service of the
    # namespace unless enableServiceLinks is false.
    links = set()
    for m in MANIFESTS_ALL:
        if m.kind == "Service" and m.obj["spec"].get("clusterIP") != "None":
            prefix = m.name.upper().replace("-", "_")
            links |= {f"{prefix}_PORT", f"{prefix}_SERVICE_HOST", f"{prefix}_SERVICE_PORT"}
    clash = links & setting_names()
    assert clash, "the Service 'parley' would set PARLEY_PORT: the reason for the flag"
    assert pod_spec(statefulset())["enableServiceLinks"] is False, clash


def test_the_pdb_and_the_headless_service_select_the_replicas() -> None:
    sts = statefulset()
    labels = template_labels(sts)
    assert matches(sts["spec"]["selector"]["matchLabels"], labels)
    pdb = find(MANIFESTS_ALL, "PodDisruptionBudget", "parley")
    assert matches(pdb["spec"]["selector"]["matchLabels"], labels)
    assert pdb["spec"]["maxUnavailable"] == 1
    headless = find(MANIFESTS_ALL, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert matches(headless["spec"]["selector"], labels)
    # A draining replica is not Ready but still holds calls: its name must resolve.
    assert headless["spec"]["publishNotReadyAddresses"] is True
    haproxy = find(MANIFESTS_ALL, "Deployment", "parley-haproxy")
    haproxy_pdb = find(MANIFESTS_ALL, "PodDisruptionBudget", "parley-haproxy")
    assert matches(haproxy_pdb["spec"]["selector"]["matchLabels"], template_labels(haproxy))


def test_every_autoscaler_targets_the_statefulset() -> None:
    sts = statefulset()
    hpas = [m.obj for m in MANIFESTS_ALL if m.kind == "HorizontalPodAutoscaler"]
    assert len(hpas) == 2  # on CPU, and optional/: on parley_sessions_active
    max_sessions = int(env_entries(parley())["PARLEY_MAX_SESSIONS"]["value"])
    for hpa in hpas:
        target = hpa["spec"]["scaleTargetRef"]
        assert target == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "parley"}
        assert hpa["spec"]["minReplicas"] == sts["spec"]["replicas"] >= 2
        for metric in hpa["spec"]["metrics"]:
            if metric["type"] == "Resource":
                assert "cpu" in parley()["resources"]["requests"], "CPU % needs a request"
            else:
                assert metric["pods"]["metric"]["name"] == "parley_sessions_active"
                assert 0 < float(metric["pods"]["target"]["averageValue"]) < max_sessions


def test_every_reference_resolves() -> None:
    """ConfigMaps, Secrets and keys named by a workload exist among the manifests."""
    for m in MANIFESTS_ALL:
        if m.kind not in WORKLOADS:
            continue
        spec = pod_spec(m.obj)
        for c in spec["containers"]:
            resolve_env(MANIFESTS_ALL, c, "parley-0")  # fails on a missing object or key
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                find(MANIFESTS_ALL, "ConfigMap", volume["configMap"]["name"])


def test_coturn_and_parley_share_the_turn_settings() -> None:
    turn = find(MANIFESTS_ALL, "Deployment", "parley-turn")
    spec = pod_spec(turn)
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert turn["spec"]["strategy"]["type"] == "Recreate", "host ports: never two at once"
    c = container(turn, "turn")
    config = find(MANIFESTS_ALL, "ConfigMap", "parley-turn")["data"]
    assert {p["containerPort"] for p in c["ports"]} == {int(config["TURN_PORT"])}
    assert int(config["TURN_MIN_PORT"]) < int(config["TURN_MAX_PORT"])
    password = env_entries(c)["TURN_PASSWORD"]["valueFrom"]
    assert env_entries(parley())["TURN_PASSWORD"]["valueFrom"] == password
    assert password["secretKeyRef"]["name"] in SECRETS_EXAMPLE.read_text()


def test_the_network_policy_admits_haproxy_to_the_server_port() -> None:
    policy = find(MANIFESTS_ALL, "NetworkPolicy", "parley")["spec"]
    assert matches(policy["podSelector"]["matchLabels"], template_labels(statefulset()))
    haproxy = template_labels(find(MANIFESTS_ALL, "Deployment", "parley-haproxy"))
    http, media = policy["ingress"]
    peers = [p["podSelector"]["matchLabels"] for p in http["from"] if "podSelector" in p]
    assert any(matches(peer, haproxy) for peer in peers)
    assert http["ports"] == [{"protocol": "TCP", "port": parley()["ports"][0]["containerPort"]}]
    assert media == {"ports": [{"protocol": "UDP"}]} and "from" not in media


def test_hadolint_the_haproxy_image() -> None:
    tool = Path(sys.executable).parent / "hadolint"
    assert tool.exists(), "hadolint is missing; install the dev extra (make install-dev)"
    dockerfile = MANIFESTS / "Dockerfile.haproxy"
    proc = subprocess.run(
        [str(tool), str(dockerfile)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
