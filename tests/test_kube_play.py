"""What ``make kube-test`` hands ``podman kube play`` (testkit/kube_play.py,
deploy/kube_play_plan.py) is the committed manifests made into what Kubernetes would run,
and nothing else; and the kubelet's probe rules (testkit/kubelet_probes.py). No podman."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.kube_play_plan import CONFIGMAPS, make_plan, not_played
from testkit.kube_play import (
    expand_references,
    find,
    for_podman,
    podman_secret,
    render,
    set_image,
    split_image,
    statefulset_pods,
)
from testkit.kubelet_probes import Outcome, Prober
from testkit.kubernetes_manifests import MANIFESTS, load_all


def test_render_is_the_files_with_the_namespace_and_images() -> None:
    rendered = render({"parley": "localhost/parley:test"})
    files = [m.obj for m in load_all() if m.path.parent == MANIFESTS]
    assert len(rendered) == len([o for o in files if o["kind"] != "Secret"])
    sts = find(rendered, "StatefulSet", "parley")
    assert sts["metadata"]["namespace"] == "parley"
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == "localhost/parley:test"
    turn = find(rendered, "Deployment", "parley-turn")
    assert turn["spec"]["template"]["spec"]["containers"][0]["image"] == "parley-turn:0.1.0"
    assert "namespace" not in find(rendered, "Namespace", "parley")["metadata"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl to compare with")
def test_render_agrees_with_kubectl_kustomize() -> None:
    proc = subprocess.run(
        ["kubectl", "kustomize", str(MANIFESTS)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    theirs = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(proc.stdout)}
    ours = {(o["kind"], o["metadata"]["name"]): o for o in render()}
    assert ours == theirs


def test_images_as_kustomize_sets_them() -> None:
    assert split_image("registry:5000/team/parley:1.2") == ("registry:5000/team/parley", "1.2")
    assert split_image("parley") == ("parley", "")
    entries = {"parley": {"name": "parley", "newName": "r.example/parley", "newTag": "2"}}
    assert set_image("parley:0.1.0", entries) == "r.example/parley:2"
    assert set_image("other:1", entries) == "other:1"


def test_the_statefulset_pods_are_its_template_with_the_controllers_fields() -> None:
    sts = find(render(), "StatefulSet", "parley")
    made = statefulset_pods(sts)
    pods = [o for o in made if o["kind"] == "Pod"]
    claims = [o for o in made if o["kind"] == "PersistentVolumeClaim"]
    assert [p["metadata"]["name"] for p in pods] == ["parley-0", "parley-1"]
    assert [c["metadata"]["name"] for c in claims] == ["data-parley-0", "data-parley-1"]
    for ordinal, pod in enumerate(pods):
        name = f"parley-{ordinal}"
        spec = copy.deepcopy(pod["spec"])
        assert (spec.pop("hostname"), spec.pop("subdomain")) == (name, "parley-headless")
        claim = spec["volumes"].pop()
        assert claim == {"name": "data", "persistentVolumeClaim": {"claimName": f"data-{name}"}}
        assert spec == sts["spec"]["template"]["spec"], "the template changed"
        labels = pod["metadata"]["labels"]
        assert labels["statefulset.kubernetes.io/pod-name"] == name
        assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert claims[0]["spec"] == sts["spec"]["volumeClaimTemplates"][0]["spec"]


def test_references_are_expanded_as_the_kubelet_does() -> None:
    pod: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {"name": "p-0"},
        "spec": {"containers": [{"name": "c", "env": [
            {"name": "HOST", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "HOST"}}},
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "PW"}}},
            {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "no", "key": "K",
                                                            "optional": True}}},
            {"name": "URL", "value": "turn:$(HOST)?u=$(ME)&p=$(PW)&x=$(LATER)$(GONE)$$(HOST)"},
            {"name": "PLAIN", "value": "as written"},
            {"name": "LATER", "value": "1"},
        ]}]},
    }  # fmt: skip
    objects: list[dict[str, Any]] = [
        {"kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"HOST": "h"}},
        {"kind": "Secret", "metadata": {"name": "s"}, "data": {"PW": "cHc="}},  # "pw"
    ]  # fmt: skip
    expanded = expand_references(pod, objects)
    env = {e["name"]: e for e in expanded["spec"]["containers"][0]["env"]}
    assert env["URL"]["value"] == "turn:h?u=p-0&p=pw&x=$(LATER)$(GONE)$(HOST)"
    assert env["PLAIN"] == {"name": "PLAIN", "value": "as written"}
    assert env["HOST"] == pod["spec"]["containers"][0]["env"][0], "left for podman"


def test_a_missing_key_that_is_not_optional_is_an_error() -> None:
    pod = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "env": [
        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "A"}}},
    ]}]}}  # fmt: skip
    with pytest.raises(LookupError):
        expand_references(pod, [])


def test_for_podman_drops_unpublished_ports_and_names_empty_dirs_by_pod() -> None:
    made = statefulset_pods(find(render(), "StatefulSet", "parley"))
    pod = next(o for o in made if o["kind"] == "Pod")
    podman = for_podman(pod)
    (c,) = podman["spec"]["containers"]
    assert "ports" not in c
    assert {v["name"] for v in podman["spec"]["volumes"]} == {"parley-0-tmp", "data"}
    assert {m["name"] for m in c["volumeMounts"]} == {"parley-0-tmp", "data"}
    c["ports"] = pod["spec"]["containers"][0]["ports"]
    for part in (podman["spec"]["volumes"], c["volumeMounts"]):
        for item in part:
            item["name"] = item["name"].removeprefix("parley-0-")
    assert podman == pod, "nothing else changed"


def test_a_secret_is_what_podman_secret_key_ref_reads() -> None:
    secret = {"data": {"A": base64.b64encode(b"a").decode()}, "stringData": {"B": "b"}}
    assert json.loads(podman_secret(secret)) == {
        "A": base64.b64encode(b"a").decode(),
        "B": base64.b64encode(b"b").decode(),
    }


def test_the_plan_plays_the_manifests_with_the_installs_values(tmp_path: Path) -> None:
    plan = make_plan(tmp_path, "192.0.2.7", "http://192.0.2.7:9/v1", "model-key")
    played = list(yaml.safe_load_all(plan.workloads_file.read_text()))
    kinds = [(o["kind"], o["metadata"]["name"]) for o in played]
    assert kinds == [("PersistentVolumeClaim", "data-parley-0"),
                     ("PersistentVolumeClaim", "data-parley-1"), ("Pod", "parley-0"),
                     ("Pod", "parley-1"), ("Deployment", "parley-turn")]  # fmt: skip
    env = {e["name"]: e for e in played[2]["spec"]["containers"][0]["env"]}
    ice = json.loads(env["PARLEY_ICE_SERVERS"]["value"])[0]
    assert ice["urls"][0] == "turn:192.0.2.7:3478?transport=udp"
    assert ice["credential"] == plan.turn_password
    assert env["PARLEY_REPLICA_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    configmaps = {p.name: yaml.safe_load(p.read_text()) for p in plan.configmap_files}
    assert sorted(configmaps) == sorted(f"configmap-{n}.yaml" for n in CONFIGMAPS)
    originals = render()
    for name in CONFIGMAPS:
        ours = configmaps[f"configmap-{name}.yaml"]["data"]
        theirs = find(originals, "ConfigMap", name)["data"]
        changed = {k for k in theirs if ours[k] != theirs[k]}
        assert changed <= {"TURN_HOST", "OPENAI_BASE_URL"} and set(ours) == set(theirs)
    assert plan.pod_names == ["parley-0", "parley-1", "parley-turn-pod-0"]
    volumes = {"data-parley-0", "data-parley-1", "parley-0-tmp", "parley-1-tmp"}
    assert set(plan.volume_names) == volumes | {"parley-turn-tmp", "parley-turn-state"}
    skipped = {o for objects in not_played(plan).values() for o in objects}
    assert "Service parley-headless" in skipped and "Deployment parley-haproxy" in skipped


async def test_the_prober_keeps_the_kubelets_thresholds() -> None:
    container = {
        "ports": [{"name": "http", "containerPort": 7860}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 0.01,
                           "failureThreshold": 2},
        "livenessProbe": {"tcpSocket": {"port": 7860}, "periodSeconds": 0.01,
                          "failureThreshold": 3},
    }  # fmt: skip
    answers = iter([True, True, False, True, False, False, True] + [True] * 1000)
    prober = Prober(container, "192.0.2.1")

    async def fake(spec: dict) -> Outcome:
        passed = next(answers) if "httpGet" in spec else True
        return Outcome(asyncio.get_running_loop().time(), passed, "fake")

    prober.probe = fake  # type: ignore[method-assign]  # no network
    prober.start()
    await asyncio.sleep(0.3)
    await prober.stop()
    events = [e for _, e in prober.transitions]
    assert events[:4] == ["Started", "Ready", "NotReady", "Ready"], events
    assert not prober.restarts
